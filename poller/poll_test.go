package poller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// TestTurn: a Turn gives the session and, read only, what a poll needs of
// its lease (token, worker, deadline, whether it ended); without a lease
// (NewTurn for a test or a direct call) token 0, no worker, no deadline;
// the SessionState only when one is given (Config.Stateful).
func TestTurn(t *testing.T) {
	s := session.Session{ID: "s1", URL: "https://example.com/", Interval: session.Duration(time.Second)}

	bare := NewTurn(s, nil, nil)
	require.Equal(t, s, bare.Session())
	require.Zero(t, bare.Token())
	require.Empty(t, bare.Worker())
	require.True(t, bare.Deadline().IsZero())
	require.False(t, bare.Ended())
	require.Nil(t, bare.State())

	client := redistest.NewClient(t, miniredis.RunT(t).Addr())
	m, err := lease.New(lease.Config{Client: client, Holder: "w1", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	res := m.Acquire(context.Background(), []string{"s1"})
	require.NoError(t, res[0].Err)
	l := res[0].Lease
	st := &SessionState{lease: l}
	held := NewTurn(s, l, st)
	require.Positive(t, held.Token())
	require.Equal(t, l.Token(), held.Token())
	require.Equal(t, "w1", held.Worker())
	require.True(t, held.Deadline().After(time.Now()), "a deadline ahead while held")
	require.False(t, held.Ended())
	require.Same(t, st, held.State())

	require.NoError(t, m.Release(context.Background(), l))
	require.True(t, held.Ended(), "released: the term has ended")
}

// withEvents is an Observer (the first) that calls f for each lease event
// too.
type withEvents struct {
	Observer
	f func(Event)
}

func (w withEvents) LeaseEvent(e Event) {
	w.Observer.LeaseEvent(e)
	w.f(e)
}

// reportLog is an Observer that keeps the lease events and poll reports.
type reportLog struct {
	NopObserver
	mu     sync.Mutex
	events []Event
	polls  []PollReport
}

func (o *reportLog) LeaseEvent(e Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *reportLog) PollDone(p PollReport) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.polls = append(o.polls, p)
}

// TestObserverSeesTheTurn: the one outlet reports a poll with the session
// and token its Turn had, and the lease event of the acquisition with the
// same token; the Poller sees the worker's id, a deadline ahead and no
// SessionState (Stateful off).
func TestObserverSeesTheTurn(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ids := addSessions(t, client, 1, 50*time.Millisecond)
	obs := &reportLog{}
	turns := make(chan *Turn, 1)
	cfg := fastConfig(client, "w", PollFunc(func(_ context.Context, tn *Turn) error {
		select {
		case turns <- tn:
		default:
		}
		return nil
	}))
	cfg.Observer = obs
	start(t, cfg)
	tn := <-turns
	require.Equal(t, ids[0], tn.Session().ID)
	require.Equal(t, "w", tn.Worker())
	require.True(t, tn.Deadline().After(time.Now()))
	require.Nil(t, tn.State())
	require.Eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.polls) > 0 && len(obs.events) > 0
	}, 10*time.Second, 10*time.Millisecond)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, PollReport{Session: ids[0], Token: tn.Token(), Duration: obs.polls[0].Duration, Outcome: "ok"}, obs.polls[0])
	require.Equal(t, EventAcquired, obs.events[0].Type)
	require.Equal(t, ids[0], obs.events[0].Session)
	require.Equal(t, tn.Token(), obs.events[0].Token)
}

// TestLeaseEventsObserver: LeaseEvents calls its function for lease events
// only.
func TestLeaseEventsObserver(t *testing.T) {
	var got []Event
	var o Observer = LeaseEvents(func(e Event) { got = append(got, e) })
	o.PollDone(PollReport{Session: "s"})
	o.Round(RoundReport{Members: 1})
	o.LeaseEvent(Event{Type: EventLost, Session: "s", Token: 3})
	require.Equal(t, []Event{{Type: EventLost, Session: "s", Token: 3}}, got)
}
