package poller

import (
	"context"
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
// the State only when one is given (Config.Stateful).
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
	st := &State{lease: l}
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
