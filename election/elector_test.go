package election

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/keyspace"
)

// fakeSetup is a miniredis plus a fake clock; TTLs move only when the test
// calls mr.FastForward, deadlines only when it steps the clock.
type fakeSetup struct {
	mr *miniredis.Miniredis
	c  *redis.Client
	fc *clocktesting.FakeClock
}

func newFake(t *testing.T) *fakeSetup {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return &fakeSetup{mr: mr, c: c, fc: clocktesting.NewFakeClock(time.Now())}
}

func (f *fakeSetup) config(id string) Config {
	return Config{Client: f.c, Role: "cron", ID: id, TTL: 3 * time.Second,
		RenewInterval: time.Second, RetryInterval: 500 * time.Millisecond, Clock: f.fc}
}

// waitLeading waits until e leads and its renew ticker and lease timer are set.
func (f *fakeSetup) waitLeading(t *testing.T, e *Elector, rec *recorder) int64 {
	t.Helper()
	var token int64
	select {
	case token = <-rec.elected:
	case <-time.After(5 * time.Second):
		t.Fatal("not elected")
	}
	require.Eventually(t, func() bool { return f.fc.Waiters() == 2 }, 5*time.Second, time.Millisecond)
	require.True(t, e.IsLeader())
	return token
}

func TestLeadsAndReleasesOnStop(t *testing.T) {
	f := newFake(t)
	rec := newRecorder()
	cfg := f.config("a")
	rec.hook(&cfg)
	e := newElector(t, cfg)
	require.Zero(t, e.Token())
	stop := start(t, e)
	token := f.waitLeading(t, e, rec)
	require.Positive(t, token)
	require.Equal(t, token, e.Token())
	id, err := e.Leader(context.Background())
	require.NoError(t, err)
	require.Equal(t, "a", id)
	require.Equal(t, []string{"a"}, rec.seen())
	require.ErrorIs(t, e.Run(context.Background()), ErrRunning)

	stop()
	require.False(t, e.IsLeader())
	require.ErrorIs(t, rec.lastCtx().Err(), context.Canceled)
	require.Equal(t, 1, rec.demotions())
	require.False(t, f.mr.Exists(keyspace.Space{}.Lease("election:cron")), "lease released on stop")
	require.False(t, f.mr.Exists("poll:candidate:{election:cron}:a"), "candidate record removed")
	id, err = e.Leader(context.Background())
	require.NoError(t, err)
	require.Empty(t, id)
}

func TestRenewErrorEndsTermAtOnce(t *testing.T) {
	f := newFake(t)
	rec := newRecorder()
	cfg := f.config("a")
	rec.hook(&cfg)
	e := newElector(t, cfg)
	start(t, e)
	first := f.waitLeading(t, e, rec)
	require.Positive(t, first)

	f.mr.SetError("LOADING test outage")
	f.fc.Step(time.Second) // one renewal, far before the deadline
	require.Eventually(t, func() bool { return rec.lastCtx().Err() != nil }, 5*time.Second, time.Millisecond)
	require.False(t, e.IsLeader())
	require.Zero(t, e.Token())
	require.Eventually(t, func() bool { return rec.demotions() == 1 }, 5*time.Second, time.Millisecond)

	// Redis is back, the old key expires there; the next term has a new token.
	f.mr.SetError("")
	f.mr.FastForward(3 * time.Second)
	require.Eventually(t, func() bool {
		f.fc.Step(500 * time.Millisecond)
		return e.IsLeader()
	}, 5*time.Second, 5*time.Millisecond)
	require.Greater(t, e.Token(), first)
}

func TestLostToAnotherOwner(t *testing.T) {
	f := newFake(t)
	rec := newRecorder()
	cfg := f.config("a")
	rec.hook(&cfg)
	e := newElector(t, cfg)
	start(t, e)
	f.waitLeading(t, e, rec)
	leaderOnly := LeaderOnly(e, func(ctx context.Context, token int64) error { return nil })
	require.NoError(t, leaderOnly(context.Background()))

	f.mr.Set(keyspace.Space{}.Lease("election:cron"), "other#0123456789abcdef")
	f.mr.SetTTL(keyspace.Space{}.Lease("election:cron"), time.Minute)
	f.fc.Step(time.Second)
	require.Eventually(t, func() bool { return rec.lastCtx().Err() != nil }, 5*time.Second, time.Millisecond)
	require.False(t, e.IsLeader())
	require.ErrorIs(t, leaderOnly(context.Background()), ErrNotLeader)
	require.Eventually(t, func() bool {
		f.fc.Step(500 * time.Millisecond)
		return len(rec.seen()) == 2
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"a", "other"}, rec.seen())
	require.False(t, e.IsLeader())
}

func TestTransferAndResignWhenNotLeader(t *testing.T) {
	f := newFake(t)
	e := newElector(t, f.config("a"))
	ctx := context.Background()
	require.NoError(t, e.Resign(ctx))
	require.ErrorIs(t, e.TransferTo(ctx, "b"), ErrNotLeader)
	require.ErrorIs(t, e.TransferTo(ctx, "a"), ErrNoCandidate)
	require.ErrorIs(t, e.TransferTo(ctx, "bad id"), keyspace.ErrInvalidID)

	rec := newRecorder()
	cfg := f.config("b")
	rec.hook(&cfg)
	b := newElector(t, cfg)
	start(t, b)
	f.waitLeading(t, b, rec)
	require.ErrorIs(t, b.TransferTo(ctx, "nobody"), ErrNoCandidate)
	require.True(t, b.IsLeader())
}

func TestLeaderOnlyCancelsWithTerm(t *testing.T) {
	f := newFake(t)
	rec := newRecorder()
	cfg := f.config("a")
	rec.hook(&cfg)
	e := newElector(t, cfg)
	start(t, e)
	f.waitLeading(t, e, rec)
	got := make(chan error, 1)
	running := make(chan int64, 1)
	go func() {
		got <- LeaderOnly(e, func(ctx context.Context, token int64) error {
			running <- token
			<-ctx.Done()
			return ctx.Err()
		})(context.Background())
	}()
	require.Positive(t, <-running)
	require.NoError(t, e.Resign(context.Background()))
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("LeaderOnly fn not cancelled by resign")
	}
}

func TestPriorityWaitsForNextRenewal(t *testing.T) {
	f := newFake(t)
	recA, recB := newRecorder(), newRecorder()
	cfgA := f.config("a")
	recA.hook(&cfgA)
	a := newElector(t, cfgA)
	start(t, a)
	f.waitLeading(t, a, recA)

	cfgB := f.config("b")
	cfgB.Priority = 10
	cfgB.RetryInterval = 100 * time.Millisecond
	recB.hook(&cfgB)
	b := newElector(t, cfgB)
	start(t, b)
	require.Eventually(t, func() bool {
		live, err := a.Candidates(context.Background())
		return err == nil && len(live) == 2 && live[0] == Candidate{ID: "b", Priority: 10}
	}, 5*time.Second, time.Millisecond)

	// Up to just before a's next renewal, b campaigns but never preempts.
	aToken := a.Token()
	for range 9 {
		f.fc.Step(100 * time.Millisecond)
		require.Never(t, b.IsLeader, 5*time.Millisecond, time.Millisecond)
		require.True(t, a.IsLeader())
	}
	// At the renewal a hands over to b.
	f.fc.Step(100 * time.Millisecond)
	require.Eventually(t, func() bool { return recA.demotions() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		f.fc.Step(100 * time.Millisecond)
		return b.IsLeader()
	}, 5*time.Second, 5*time.Millisecond)
	require.Greater(t, b.Token(), aToken)
	require.False(t, a.IsLeader())
}
