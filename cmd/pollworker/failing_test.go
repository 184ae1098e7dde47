package main

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// TestFailingTable: the status page's table lists the sessions whose last
// poll failed, longest failing first, forgets one that succeeds, and
// forgets one whose lease was released; the failures it counts for a poll
// without saved state are those under the same lease only.
func TestFailingTable(t *testing.T) {
	c := redistest.NewClient(t, miniredis.RunT(t).Addr())
	m, err := lease.New(lease.Config{Client: c, Holder: "w1", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	held := map[string]*poller.Turn{}
	leases := map[string]*lease.Lease{}
	for _, r := range m.Acquire(ctxT(t), []string{"a", "b", "c"}) {
		require.NoError(t, r.Err)
		held[r.Session] = poller.NewTurn(session.Session{ID: r.Session}, r.Lease, nil)
		leases[r.Session] = r.Lease
	}
	t.Cleanup(func() { _ = m.ReleaseAll(context.Background()) })

	at := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	fail := func(n int, since time.Time) httppoll.State {
		return httppoll.State{Status: 503, Error: "server", Failures: n, FailingSince: since, Polled: at}
	}
	f := newFailing()
	f.Update("a", held["a"], fail(2, at.Add(-time.Minute)))
	f.Update("b", held["b"], fail(5, at.Add(-time.Hour)))
	f.Update("c", held["c"], fail(1, at))
	require.Equal(t, []failingSession{
		{Session: "b", Failures: 5, Status: 503, Error: "server", Since: at.Add(-time.Hour), LastPoll: at, Token: held["b"].Token()},
		{Session: "a", Failures: 2, Status: 503, Error: "server", Since: at.Add(-time.Minute), LastPoll: at, Token: held["a"].Token()},
		{Session: "c", Failures: 1, Status: 503, Error: "server", Since: at, LastPoll: at, Token: held["c"].Token()},
	}, f.list())

	n, since := f.Failures("a", held["a"])
	require.Equal(t, 2, n)
	require.Equal(t, at.Add(-time.Minute), since)
	n, _ = f.Failures("a", nil)
	require.Zero(t, n, "another lease")

	f.Update("c", held["c"], httppoll.State{Status: 200, Polled: at})
	require.NoError(t, m.Release(ctxT(t), leases["a"]))
	require.Equal(t, []string{"b"}, sessionsOfFailing(f.list()), "c recovered, a's lease ended")
}

func sessionsOfFailing(fs []failingSession) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Session
	}
	return out
}
