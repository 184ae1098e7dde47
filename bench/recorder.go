package bench

import (
	"sync"
	"time"
)

// Recorder remembers, per session, who polled it last and when, and
// measures gaps: after Watch, the time from a mark to the first poll of
// each watched session by another worker than the one it is moving from.
type Recorder struct {
	mu    sync.Mutex
	last  map[string]pollRec // every session polled so far
	polls int64

	watchFrom  map[string]string // session -> worker it is moving away from ("" = any)
	watchOnly  string            // if set, only polls by this worker count
	mark       time.Time
	gaps       map[string]time.Duration // mark -> first poll by successor
	holes      map[string]time.Duration // previous poll by anyone -> first poll by successor
	watchDone  chan struct{}
	wantPolled int
	allPolled  chan struct{}
}

type pollRec struct {
	worker string
	at     time.Time
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{last: map[string]pollRec{}}
}

// Poll records a poll of session by worker at the current time.
func (r *Recorder) Poll(session, worker string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.polls++
	prev, seen := r.last[session]
	r.last[session] = pollRec{worker: worker, at: now}
	if !seen {
		if r.allPolled != nil && len(r.last) >= r.wantPolled {
			close(r.allPolled)
			r.allPolled = nil
		}
	}
	if r.watchDone == nil {
		return
	}
	from, ok := r.watchFrom[session]
	if !ok || worker == from || (r.watchOnly != "" && worker != r.watchOnly) {
		return
	}
	if _, done := r.gaps[session]; done {
		return
	}
	r.gaps[session] = now.Sub(r.mark)
	if seen && prev.worker != worker {
		r.holes[session] = now.Sub(prev.at)
	}
	if len(r.gaps) == len(r.watchFrom) {
		close(r.watchDone)
		r.watchDone = nil
	}
}

// WaitPolled returns a channel closed once n distinct sessions have been
// polled at least once.
func (r *Recorder) WaitPolled(n int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	if len(r.last) == 0 {
		r.last = make(map[string]pollRec, n) // no growth while measuring
	}
	if len(r.last) >= n {
		close(ch)
		return ch
	}
	r.wantPolled, r.allPolled = n, ch
	return ch
}

// Polled is the number of distinct sessions polled so far.
func (r *Recorder) Polled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.last)
}

// Owners returns, per session, the worker that polled it last.
func (r *Recorder) Owners() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.last))
	for s, p := range r.last {
		out[s] = p.worker
	}
	return out
}

// Watch starts measuring: from mark, the first poll of each session in from
// by a worker other than from[session] (and, when only is set, by only).
// The returned channel is closed when every watched session was polled.
func (r *Recorder) Watch(mark time.Time, from map[string]string, only string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.watchFrom, r.watchOnly, r.mark = from, only, mark
	r.gaps = make(map[string]time.Duration, len(from))
	r.holes = make(map[string]time.Duration, len(from))
	if len(from) == 0 {
		close(ch)
		return ch
	}
	r.watchDone = ch
	return ch
}

// Gaps returns the measured gaps (mark to first poll by the successor) and
// holes (last poll by anyone to first poll by the successor), and how many
// watched sessions were never picked up.
func (r *Recorder) Gaps() (gaps, holes []time.Duration, missing int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gaps {
		gaps = append(gaps, g)
	}
	for _, h := range r.holes {
		holes = append(holes, h)
	}
	r.watchDone = nil
	return gaps, holes, len(r.watchFrom) - len(r.gaps)
}
