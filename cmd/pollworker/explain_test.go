package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// explainFixture is a real redis-server with sessions s1 (active) and p1
// (paused) and live workers w1, w2, w3.
type explainFixture struct {
	url    string
	client *redis.Client
	regs   map[string]*nodes.Registry
}

func newExplainFixture(t *testing.T) *explainFixture {
	t.Helper()
	srv := redistest.Start(t)
	f := &explainFixture{url: srv.URL(), client: srv.Client(t), regs: map[string]*nodes.Registry{}}
	ctx := ctxT(t)
	_, err := lease.MarkFresh(ctx, f.client, keyspace.Space{})
	require.NoError(t, err)
	store, err := session.NewStore(f.client, keyspace.Space{})
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, session.Session{ID: "s1", URL: "http://127.0.0.1:1/s1", Interval: session.Duration(time.Second)}))
	require.NoError(t, store.Put(ctx, session.Session{ID: "p1", URL: "http://127.0.0.1:1/p1", Interval: session.Duration(time.Second), Paused: true}))
	for _, id := range []string{"w1", "w2", "w3"} {
		f.join(t, id)
	}
	return f
}

// join heartbeats worker id (once, with a minute's TTL).
func (f *explainFixture) join(t *testing.T, id string) {
	t.Helper()
	reg, err := nodes.New(nodes.Config{Client: f.client, ID: id, TTL: time.Minute, Incarnation: "inc" + id})
	require.NoError(t, err)
	require.NoError(t, reg.Heartbeat(ctxT(t)))
	f.regs[id] = reg
}

// take acquires session id's lease as holder with incarnation.
func (f *explainFixture) take(t *testing.T, id, holder, incarnation string) {
	t.Helper()
	m, err := lease.New(lease.Config{Client: f.client, Holder: holder, Incarnation: incarnation, TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	for _, r := range m.Acquire(ctxT(t), []string{id}) {
		require.NoError(t, r.Err)
		require.NotNil(t, r.Lease)
	}
}

func (f *explainFixture) explain(t *testing.T, id string) fleet.Explanation {
	t.Helper()
	res := runApp(t, "explain", "--redis-url", f.url, "--json", id)
	require.Equal(t, exitOK, res.code, res.stderr)
	var e fleet.Explanation
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &e), res.stdout)
	return e
}

// TestExplainOnRedis: each situation explain reads from Redis, set up on a
// real redis-server.
func TestExplainOnRedis(t *testing.T) {
	t.Run("preferred owner", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		require.Len(t, e.Ranking, 3)
		require.Equal(t, e.Ranking[0].ID, e.Planned, "two sessions: nothing for the bound to move")
		require.Equal(t, "inc"+e.Planned, e.Ranking[0].Incarnation)
		f.take(t, "s1", e.Planned, "inc"+e.Planned)
		e = f.explain(t, "s1")
		require.Equal(t, fleet.ReasonPreferred, e.Reason, e.Why)
		require.NotNil(t, e.Lease)
		require.True(t, e.Lease.Live && e.Lease.Current)
		require.Zero(t, e.Token, "no fencing record before the session's first release")
		require.GreaterOrEqual(t, e.Lease.AcquiredAgoMs, int64(0), "read off the owner value's time")
		require.Greater(t, e.Lease.ExpiresInMs, int64(50000))

		res := runApp(t, "explain", "--redis-url", f.url, "s1")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Contains(t, res.stdout, "why:             preferred owner: "+e.Planned)
		require.Contains(t, res.stdout, "rendezvous owner, planned owner, holder")
	})
	t.Run("unowned, then quarantined, then a restart seen", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		require.Equal(t, fleet.ReasonUnowned, e.Reason, e.Why)
		require.Nil(t, e.Lease)
		require.True(t, e.Loss.Present)
		require.NotEmpty(t, e.Loss.ServerRunID)

		marker := keyspace.Space{}.Epoch(0)
		now, err := f.client.Time(ctxT(t)).Result()
		require.NoError(t, err)
		require.NoError(t, f.client.Set(ctxT(t), marker, fmt.Sprintf("%s:%d", e.Loss.ServerRunID, now.UnixMilli()+60000), 0).Err())
		e = f.explain(t, "s1")
		require.Equal(t, fleet.ReasonQuarantine, e.Reason, e.Why)
		require.Greater(t, e.Loss.QuarantineLeftMs, int64(50000))

		require.NoError(t, f.client.Set(ctxT(t), marker, "0123abcd:1", 0).Err())
		e = f.explain(t, "s1")
		require.Equal(t, fleet.ReasonLossDetected, e.Reason, e.Why)
		require.Contains(t, e.Why, "run id 0123abcd")

		require.NoError(t, f.client.Del(ctxT(t), marker).Err())
		e = f.explain(t, "s1")
		require.Equal(t, fleet.ReasonLossDetected, e.Reason, e.Why)
		require.Contains(t, e.Why, "loss marker is missing")
	})
	t.Run("no live worker", func(t *testing.T) {
		f := newExplainFixture(t)
		for _, reg := range f.regs {
			require.NoError(t, reg.Leave(ctxT(t)))
		}
		e := f.explain(t, "s1")
		require.Equal(t, fleet.ReasonNoWorker, e.Reason, e.Why)
		require.Empty(t, e.Ranking)
	})
	t.Run("held by a worker that is not live", func(t *testing.T) {
		f := newExplainFixture(t)
		f.take(t, "s1", "ghost", "incghost")
		e := f.explain(t, "s1")
		require.Equal(t, fleet.ReasonHolderNotLive, e.Reason, e.Why)
		require.Equal(t, "ghost", e.Lease.Holder)
		require.False(t, e.Lease.Live)
	})
	t.Run("held by a previous incarnation", func(t *testing.T) {
		f := newExplainFixture(t)
		f.take(t, "s1", "w2", "oldw2")
		e := f.explain(t, "s1")
		require.Equal(t, fleet.ReasonPreviousIncarnation, e.Reason, e.Why)
		require.Equal(t, "oldw2", e.Lease.Incarnation)
		require.True(t, e.Lease.Live)
		require.False(t, e.Lease.Current)
	})
	t.Run("held by the watcher", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		f.take(t, "s1", e.Watcher, "inc"+e.Watcher)
		e = f.explain(t, "s1")
		require.Equal(t, fleet.ReasonOrphan, e.Reason, e.Why)
	})
	t.Run("held by another worker that just took it", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		other := e.Ranking[2].ID
		require.NotEqual(t, e.Planned, other)
		require.NotEqual(t, e.Watcher, other)
		f.take(t, "s1", other, "inc"+other)
		e = f.explain(t, "s1")
		require.Equal(t, fleet.ReasonSettling, e.Reason, e.Why)
		// Once the lease is older than the (here 10 ms) lease TTL, the
		// hold-back is over: the holder should hand it off.
		require.Eventually(t, func() bool {
			res := runApp(t, "explain", "--redis-url", f.url, "--json", "--lease-ttl", "10ms", "s1")
			require.Equal(t, exitOK, res.code, res.stderr)
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &e))
			return e.Reason == fleet.ReasonContended
		}, 5*time.Second, 5*time.Millisecond, "reason %s: %s", e.Reason, e.Why)
	})
	t.Run("a key of the wrong type", func(t *testing.T) {
		f := newExplainFixture(t)
		ks := keyspace.Space{}
		for _, key := range []string{ks.Lease("s1"), ks.Fencing("s1")} {
			typ := "hash"
			require.NoError(t, f.client.Del(ctxT(t), key).Err())
			if key == ks.Fencing("s1") {
				typ = "string"
				require.NoError(t, f.client.Set(ctxT(t), key, "planted", 0).Err())
			} else {
				require.NoError(t, f.client.HSet(ctxT(t), key, "planted", "1").Err())
			}
			e := f.explain(t, "s1")
			require.Equal(t, fleet.ReasonBadKey, e.Reason, e.Why)
			require.Equal(t, key, e.BadKey.Key)
			require.Contains(t, e.Why, "wrong type "+typ)
			res := runApp(t, "sessions", "get", "--redis-url", f.url, "s1")
			require.Equal(t, exitOK, res.code, res.stderr)
			require.Contains(t, res.stdout, "bad key:")
			require.NoError(t, f.client.Del(ctxT(t), key).Err())
		}
		require.NoError(t, f.client.Del(ctxT(t), ks.Epoch(0)).Err())
		require.NoError(t, f.client.HSet(ctxT(t), ks.Epoch(0), "planted", "1").Err())
		e := f.explain(t, "s1")
		require.Contains(t, e.Loss.RunID, "wrong type")
	})
	t.Run("paused and not found", func(t *testing.T) {
		f := newExplainFixture(t)
		require.Equal(t, fleet.ReasonPaused, f.explain(t, "p1").Reason)
		// Explained, but exit 1 as sessions get (issue 22: explain nope exited 0).
		res := runApp(t, "explain", "--redis-url", f.url, "--json", "nope")
		require.Equal(t, exitFailure, res.code, res.stderr)
		require.Equal(t, "pollworker: explain nope: no such session\n", res.stderr)
		var e fleet.Explanation
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &e), res.stdout)
		require.Equal(t, fleet.ReasonNotFound, e.Reason)
		require.False(t, e.Found)
		require.Len(t, e.Ranking, 3, "the ranking is shown anyway")
		require.NoError(t, f.client.Set(ctxT(t), keyspace.Space{}.Session("bad"), "not json", 0).Err())
		require.Equal(t, fleet.ReasonMalformed, f.explain(t, "bad").Reason)
	})
}

// TestExplainBadInput: one line naming the rule, exit 2.
func TestExplainBadInput(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{name: "no session", args: []string{"explain"}, want: "explain: takes exactly one session id, got 0 arguments"},
		{name: "two sessions", args: []string{"explain", "a", "b"}, want: "got 2 arguments"},
		{name: "invalid id", args: []string{"explain", "a b"}, want: `explain: session id: invalid id: "a b" has byte ' ' at 1`},
		{name: "lease ttl", args: []string{"explain", "--lease-ttl", "0s", "a"}, want: "explain: --lease-ttl (0s) must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := runApp(t, tt.args...)
			require.Equal(t, exitUsage, res.code)
			oneLine(t, res.stderr)
			require.Contains(t, res.stderr, tt.want)
			require.True(t, strings.HasPrefix(res.stderr, "pollworker: "))
		})
	}
}

// TestExplainSaysRedisIsFull: over its maxmemory Redis takes no lease, and
// explain gave an unowned session's planned owner as taking it "at its
// next round" with no word of memory.
func TestExplainSaysRedisIsFull(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	r := runApp(t, "sessions", "--redis-url", srv.URL(), "add", "--id", "a1", "--url", "http://127.0.0.1:1/", "--interval", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "explain", "--redis-url", srv.URL(), "a1")
	require.NotContains(t, r.stdout, "REDIS FULL")
	require.NoError(t, client.ConfigSet(ctxT(t), "maxmemory", "1").Err())
	t.Cleanup(func() { _ = client.ConfigSet(ctxT(t), "maxmemory", "0").Err() })
	r = runApp(t, "explain", "--redis-url", srv.URL(), "a1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "REDIS FULL: Redis uses ")
}

// TestPrintExplanationTokenAndCap: a held lease without a fencing record
// says where its token is; a worker planned above its cap is explained.
func TestPrintExplanationTokenAndCap(t *testing.T) {
	e := fleet.Explanation{Session: "s1", Found: true, Definition: &fleet.Definition{IntervalMs: 1000}, Planned: "w1", PlanUnit: "polls/day",
		Lease:   &fleet.LeaseFacts{Holder: "w1", Live: true, Current: true, AcquiredAgoMs: -1},
		Ranking: []fleet.RankedWorker{{ID: "w1", Weight: 1, Planned: 460800, Cap: 455885}, {ID: "w2", Weight: 1, Planned: 100, Cap: 455885}}}
	var out strings.Builder
	printExplanation(&out, e, nil)
	require.Contains(t, out.String(), "not recorded yet: its holder sends it with every poll (X-Poll-Token)")
	require.Contains(t, out.String(), "a load above its cap: the plan never splits a bucket")

	e.Lease, e.Ranking[0].Planned = nil, 1000
	out.Reset()
	printExplanation(&out, e, nil)
	require.Contains(t, out.String(), "none recorded (a session's fencing record is created by its first graceful release")
	require.NotContains(t, out.String(), "above its cap")
}
