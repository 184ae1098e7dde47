package poller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// pairObserver counts the rounds that saw two live members.
type pairObserver struct {
	NopObserver
	rounds atomic.Int64
}

func (o *pairObserver) Round(r RoundReport) {
	if r.Members == 2 {
		o.rounds.Add(1)
	}
}

// TestWorkerReadingOtherSessionsTakesNothing: a worker started with
// another session prefix under the same key prefix (an operator's typo)
// cannot see the fleet's sessions. The fleet leaves it out of placement:
// the worker that polls them keeps every lease it holds (the same owner
// value: never released, so never unpolled for the orphan watch to find),
// and the other takes none.
func TestWorkerReadingOtherSessionsTakesNothing(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 40, 50*time.Millisecond)
	rec := newRecorder()
	obs := &pairObserver{}
	cfg := fastConfig(client, "w1", rec.poller("w1"))
	cfg.Observer = obs
	start(t, cfg)
	require.Eventually(t, func() bool {
		own := owners(t, client, ids)
		for _, id := range ids {
			if own[id] != "w1" {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	before, err := lease.Inspect(context.Background(), client, keyspace.Space{}, ids, 0)
	require.NoError(t, err)

	other := fastConfig(client, "w2", rec.poller("w2"))
	other.Keys = keyspace.Space{SessionPrefix: "sesion"}
	start(t, other)
	// w1 has planned with w2 among the live members, in three rounds.
	require.Eventually(t, func() bool { return obs.rounds.Load() >= 3 }, 30*time.Second, 20*time.Millisecond)

	after, err := lease.Inspect(context.Background(), client, keyspace.Space{}, ids, 0)
	require.NoError(t, err)
	for i := range ids {
		require.Equal(t, before[i].Owner, after[i].Owner, "session %s: w1's lease was released or taken again", ids[i])
	}
	for id, w := range rec.lastPoller() {
		require.Equal(t, "w1", w, "session %s", id)
	}
	rec.check(t)
}

// TestEmptyIndexIsSaid: a worker whose session index is empty (another
// database, another session prefix, or none written yet) says so at
// once, and says when sessions appear.
func TestEmptyIndexIsSaid(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	addSessions(t, client, 0, time.Second) // a fresh keyspace: no quarantine
	core, logs := observer.New(zap.InfoLevel)
	rec := newRecorder()
	cfg := fastConfig(client, "w1", rec.poller("w1"))
	cfg.Logger = zap.New(core)
	start(t, cfg)
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("no sessions to poll").Len() == 1 },
		30*time.Second, 20*time.Millisecond, "an empty index was not said")
	addSessions(t, client, 3, 50*time.Millisecond)
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("holds sessions again").Len() == 1 },
		30*time.Second, 20*time.Millisecond, "sessions appearing were not said")
	require.Eventually(t, func() bool { return len(rec.lastPoller()) == 3 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, logs.FilterMessageSnippet("no sessions to poll").Len(), "said more than once")
}
