package demo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pollworker/pollworker/internal/history"
	"github.com/pollworker/pollworker/poller"
)

// recorder records what the demo's workers do: every poll (timed
// in-process, around Poller.Poll) and every lease change they report. Every
// number the demo prints comes from it: the status lines and the
// announcements from snapshots, the summary from the history, checked by
// package history. Times are read under its lock, so that the history is
// in time order and a snapshot at time t holds exactly what the history
// holds at t. It is safe for concurrent use.
type recorder struct {
	start time.Time

	mu      sync.Mutex
	holding history.Holding       // lease holders now
	leases  []history.LeaseChange // every change, in order
	polls   []pollRecord          // finished polls, in order of their end
	started map[string]int        // worker -> polls started
	lines   []line                // the demo's announcements
}

// pollRecord is a finished poll and how it ended.
type pollRecord struct {
	history.Poll
	Failed bool // ended with an error other than a cancellation
}

// line is one announcement of the demo.
type line struct {
	at   time.Duration // since the start
	text string
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, started: map[string]int{}}
}

// since is the time since the demo's start.
func (r *recorder) since() time.Duration { return time.Since(r.start) }

// sinceLocked is since, read under the lock: in order with the history.
func (r *recorder) sinceLocked() time.Duration { return time.Since(r.start) }

// wrap returns a Poller that records the polls of worker around p.
func (r *recorder) wrap(worker string, p poller.Poller) poller.Poller {
	return poller.PollFunc(func(ctx context.Context, t *poller.Turn) error {
		rec := pollRecord{Poll: history.Poll{Session: t.Session().ID, Worker: worker, Token: t.Token()}}
		r.mu.Lock()
		rec.Start = time.Now()
		r.started[worker]++
		r.mu.Unlock()

		err := p.Poll(ctx, t)

		r.mu.Lock()
		defer r.mu.Unlock()
		rec.End = time.Now()
		rec.Abandoned = errors.Is(err, context.Canceled)
		rec.Failed = err != nil && !rec.Abandoned
		r.polls = append(r.polls, rec)
		return err
	})
}

// onEvent returns the lease event hook of worker (poller.LeaseEvents).
// Coordinators call it from their own goroutines; it does not block beyond
// the lock.
func (r *recorder) onEvent(worker string) func(poller.Event) {
	return func(ev poller.Event) {
		held := ev.Type == poller.EventAcquired || ev.Type == poller.EventRecovered
		r.mu.Lock()
		defer r.mu.Unlock()
		c := history.LeaseChange{At: time.Now(), Session: ev.Session, Worker: worker, Held: held}
		r.leases = append(r.leases, c)
		r.holding.Apply(c)
	}
}

// snapshot is the state of the demo at one moment: what the status lines
// and the announcements print.
type snapshot struct {
	at      time.Duration     // since the start
	holders map[string]string // session -> worker holding its lease
	polls   map[string]int    // worker -> polls started
}

// counts returns the sessions each worker holds.
func (s snapshot) counts() map[string]int { return history.CountBy(s.holders) }

func (r *recorder) snapshot() snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return snapshot{at: r.sinceLocked(), holders: r.holding.Map(), polls: maps.Clone(r.started)}
}

// logf adds an announcement made at the time of s (or now, if s is nil).
func (r *recorder) logf(s *snapshot, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.sinceLocked()
	if s != nil {
		at = s.at
	}
	r.lines = append(r.lines, line{at: at, text: fmt.Sprintf(format, args...)})
}

// linesSince returns the announcements from index i on.
func (r *recorder) linesSince(i int) []line {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.lines) {
		return nil
	}
	return slices.Clone(r.lines[i:])
}

// history returns what was recorded so far; end closes it.
func (r *recorder) history(end time.Time) (history.History, []pollRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := history.History{Leases: slices.Clone(r.leases), End: end}
	h.Polls = make([]history.Poll, len(r.polls))
	for i, p := range r.polls {
		h.Polls[i] = p.Poll
	}
	return h, slices.Clone(r.polls)
}

// acquiredAt returns when the current holder of session id acquired its
// lease, as a time since the start.
func (r *recorder) acquiredAt(id, worker string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.leases) - 1; i >= 0; i-- {
		if c := r.leases[i]; c.Session == id && c.Worker == worker && c.Held {
			return c.At.Sub(r.start)
		}
	}
	return 0
}
