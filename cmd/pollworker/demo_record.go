package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// maxProblems bounds the violations the recorder describes.
const maxProblems = 5

// demoRecorder watches the demo's polls and lease events, and checks the
// promise pollworker makes: a session is never polled by two workers at
// once, and the fencing tokens of its polls never go backwards. Polls are
// timed in-process, around Poller.Poll, so both checks are exact. It is
// safe for concurrent use.
type demoRecorder struct {
	start time.Time

	mu         sync.Mutex
	active     map[string]map[int64]string // session -> token -> worker, polls in progress
	maxToken   map[string]int64            // session -> highest token polled with
	lastWorker map[string]string           // session -> worker of the last poll
	history    map[string][]pollMark       // session -> polls, in start order
	owner      map[string]string           // session -> worker holding its lease, from events
	polls      map[string]int              // worker -> polls
	failed     map[string]int              // worker -> polls that failed (not aborted)
	aborted    int                         // polls cut short by a handoff or shutdown
	handoffs   int                         // times a session's poller changed
	overlaps   int                         // polls that started while another poll of the session ran
	stale      int                         // polls with a token below one already used
	problems   []string                    // the first violations, described
	topToken   int64
	topSession string
	events     []demoEvent
}

// pollMark is one poll's start.
type pollMark struct {
	worker string
	at     time.Duration // since the demo's start
}

// demoEvent is a line of the demo's event log.
type demoEvent struct {
	at   time.Duration
	text string
}

func newDemoRecorder(start time.Time) *demoRecorder {
	return &demoRecorder{
		start:      start,
		active:     map[string]map[int64]string{},
		maxToken:   map[string]int64{},
		lastWorker: map[string]string{},
		history:    map[string][]pollMark{},
		owner:      map[string]string{},
		polls:      map[string]int{},
		failed:     map[string]int{},
	}
}

// since is the time since the demo's start.
func (r *demoRecorder) since() time.Duration { return time.Since(r.start) }

// wrap returns a Poller that records the polls of worker around p.
func (r *demoRecorder) wrap(worker string, p poller.Poller) poller.Poller {
	return poller.PollFunc(func(ctx context.Context, s session.Session, l *lease.Lease) error {
		token := l.Token()
		r.begin(worker, s.ID, token)
		err := p.Poll(ctx, s, l)
		r.end(worker, s.ID, token, err)
		return err
	})
}

func (r *demoRecorder) begin(worker, id string, token int64) {
	at := r.since()
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, w := range r.active[id] {
		r.overlaps++
		r.problemLocked("%v: %s polled %s (token %d) while %s was polling it (token %d)", at.Round(time.Millisecond), worker, id, token, w, t)
	}
	if token < r.maxToken[id] {
		r.stale++
		r.problemLocked("%v: %s polled %s with token %d after token %d was used", at.Round(time.Millisecond), worker, id, token, r.maxToken[id])
	}
	r.maxToken[id] = max(r.maxToken[id], token)
	if token > r.topToken {
		r.topToken, r.topSession = token, id
	}
	if last, ok := r.lastWorker[id]; ok && last != worker {
		r.handoffs++
	}
	r.lastWorker[id] = worker
	r.history[id] = append(r.history[id], pollMark{worker: worker, at: at})
	if r.active[id] == nil {
		r.active[id] = map[int64]string{}
	}
	r.active[id][token] = worker
	r.polls[worker]++
}

func (r *demoRecorder) end(worker, id string, token int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.active[id], token)
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled):
		r.aborted++
	default:
		r.failed[worker]++
	}
}

func (r *demoRecorder) problemLocked(format string, args ...any) {
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// onEvent returns the coordinator event hook of worker: it tracks which
// worker holds each session's lease.
func (r *demoRecorder) onEvent(worker string) func(poller.Event) {
	return func(ev poller.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch ev.Type {
		case poller.EventAcquired, poller.EventRecovered:
			r.owner[ev.Session] = worker
		default:
			if r.owner[ev.Session] == worker {
				delete(r.owner, ev.Session)
			}
		}
	}
}

// logf adds a line to the event log.
func (r *demoRecorder) logf(format string, args ...any) {
	at := r.since()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, demoEvent{at: at, text: fmt.Sprintf(format, args...)})
}

// eventsSince returns the events from index i on.
func (r *demoRecorder) eventsSince(i int) []demoEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.events) {
		return nil
	}
	return append([]demoEvent(nil), r.events[i:]...)
}

// owners returns who holds each session's lease, by session.
func (r *demoRecorder) owners() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.owner)
}

// ownedBy returns the sessions whose lease worker holds.
func (r *demoRecorder) ownedBy(worker string) []string {
	var out []string
	for id, w := range r.owners() {
		if w == worker {
			out = append(out, id)
		}
	}
	return out
}

// pollsOf returns how many polls worker started.
func (r *demoRecorder) pollsOf(worker string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.polls[worker]
}

// moved reports, for each of ids, the first worker other than from that
// polled it at or after t; done is true when every id has one, and last is
// when the last of them started.
func (r *demoRecorder) moved(ids []string, from string, t time.Duration) (to map[string]string, done bool, last time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	to = map[string]string{}
	for _, id := range ids {
		for _, m := range r.history[id] {
			if m.at >= t && m.worker != from {
				to[id] = m.worker
				last = max(last, m.at)
				break
			}
		}
	}
	return to, len(to) == len(ids), last
}

// taken reports which of ids worker polled at or after t, who polled each
// last before t, and when the last of them was first polled by worker.
func (r *demoRecorder) taken(ids []string, worker string, t time.Duration) (from map[string]string, done bool, last time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from = map[string]string{}
	for _, id := range ids {
		prev := "nobody"
		for _, m := range r.history[id] {
			if m.at < t {
				prev = m.worker
				continue
			}
			if m.worker == worker {
				from[id] = prev
				last = max(last, m.at)
				break
			}
		}
	}
	return from, len(from) == len(ids), last
}

// demoTotals is what the recorder saw, for the summary.
type demoTotals struct {
	polls      map[string]int
	failed     map[string]int
	aborted    int
	handoffs   int
	overlaps   int
	stale      int
	problems   []string
	topToken   int64
	topSession string
}

func (r *demoRecorder) totals() demoTotals {
	r.mu.Lock()
	defer r.mu.Unlock()
	return demoTotals{
		polls:      maps.Clone(r.polls),
		failed:     maps.Clone(r.failed),
		aborted:    r.aborted,
		handoffs:   r.handoffs,
		overlaps:   r.overlaps,
		stale:      r.stale,
		problems:   append([]string(nil), r.problems...),
		topToken:   r.topToken,
		topSession: r.topSession,
	}
}
