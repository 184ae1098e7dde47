package bench

import (
	"fmt"
	"math"
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
	holeFrom   map[string]time.Time     // when that previous poll was
	watchDone  chan struct{}
	wantPolled int
	allPolled  chan struct{}
	firsts     []firstPoll // every session's first poll, in order, after WaitPolled
}

type firstPoll struct {
	session, worker string
	at              time.Time
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
		if r.firsts != nil {
			r.firsts = append(r.firsts, firstPoll{session, worker, now})
		}
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
		r.holeFrom[session] = prev.at
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
		r.firsts = make([]firstPoll, 0, n)
	}
	if len(r.last) >= n {
		close(ch)
		return ch
	}
	r.wantPolled, r.allPolled = n, ch
	return ch
}

// FirstPolls reports, for each fraction in fracs (0 < f ≤ 1) of the n
// sessions WaitPolled waited for, the time from t0 until that many had
// been polled once (-1 while fewer have), and the last k sessions polled
// for the first time, as "session by worker at +d".
func (r *Recorder) FirstPolls(t0 time.Time, n int, fracs []float64, k int) (at []time.Duration, last []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range fracs {
		i := int(math.Ceil(f*float64(n))) - 1
		if i < 0 || i >= len(r.firsts) {
			at = append(at, -1)
			continue
		}
		at = append(at, r.firsts[i].at.Sub(t0))
	}
	for _, p := range r.firsts[max(0, len(r.firsts)-k):] {
		last = append(last, fmt.Sprintf("%s by %s at +%.2fs", p.session, p.worker, p.at.Sub(t0).Seconds()))
	}
	return at, last
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
	r.holeFrom = make(map[string]time.Time, len(from))
	if len(from) == 0 {
		close(ch)
		return ch
	}
	r.watchDone = ch
	return ch
}

// Lateness returns, for each hole (Gaps), how late the successor's first
// poll came against the schedule it keeps: the previous poll, the
// interval, and step(session, interval, previous poll + interval), the
// spread step the scheduler adds to move a session onto its phase
// (poller.SpreadStep).
func (r *Recorder) Lateness(interval time.Duration, step func(string, time.Duration, time.Time) time.Duration) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(r.holes))
	for session, h := range r.holes {
		due := r.holeFrom[session].Add(interval)
		out = append(out, h-interval-step(session, interval, due))
	}
	return out
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
