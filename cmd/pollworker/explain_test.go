package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// TestWhy is the reasoning of explain: facts in, one reason and sentence
// out.
func TestWhy(t *testing.T) {
	active := &sessionDefinition{IntervalMs: 1000}
	ranking := []rankedWorker{{ID: "w1"}, {ID: "w2"}, {ID: "w3"}}
	base := func(f func(e *explanation)) explanation {
		e := explanation{Session: "s1", Found: true, Definition: active, Ranking: ranking, Planned: "w1", Watcher: "w2",
			LeaseTTLMs: 30000, Loss: lossFacts{Present: true, RunID: "r1", ServerRunID: "r1"}}
		f(&e)
		return e
	}
	held := func(holder string, mod ...func(l *leaseFacts)) func(e *explanation) {
		return func(e *explanation) {
			e.Lease = &leaseFacts{Holder: holder, Incarnation: "i1", Live: true, Current: true, ExpiresInMs: 25000, AcquiredAgoMs: 60000}
			for _, m := range mod {
				m(e.Lease)
			}
		}
	}
	tests := []struct {
		name       string
		give       explanation
		wantReason string
		wantWhy    string
	}{
		{name: "preferred", give: base(held("w1")), wantReason: reasonPreferred, wantWhy: "preferred owner: w1 polls it, as planned (its rendezvous owner)"},
		{name: "moved by the bound", give: base(func(e *explanation) {
			e.Planned, e.MovedByBound, e.Watcher = "w2", true, "w1"
			held("w2")(e)
		}), wantReason: reasonPreferred, wantWhy: "balance bound moved its bucket off its rendezvous owner w1"},
		{name: "not found", give: base(func(e *explanation) { e.Found, e.Definition = false, nil }),
			wantReason: reasonNotFound, wantWhy: "session not found: no definition is stored under this id"},
		{name: "not found, lease left", give: base(func(e *explanation) {
			e.Found, e.Definition = false, nil
			held("w3")(e)
		}), wantReason: reasonNotFound, wantWhy: "w3 still holds its lease and releases it at its next round"},
		{name: "malformed", give: base(func(e *explanation) { e.Definition, e.Malformed = nil, "session: malformed: bad json" }),
			wantReason: reasonMalformed, wantWhy: "malformed (session: malformed: bad json)"},
		{name: "paused", give: base(func(e *explanation) { e.Definition = &sessionDefinition{IntervalMs: 1000, Paused: true} }),
			wantReason: reasonPaused, wantWhy: "paused: no worker polls it"},
		{name: "paused, lease of a crashed holder", give: base(func(e *explanation) {
			e.Definition = &sessionDefinition{IntervalMs: 1000, Paused: true}
			held("ghost", func(l *leaseFacts) { l.Live, l.Current = false, false })(e)
		}), wantReason: reasonPaused, wantWhy: "held by ghost, which is not live, until it expires in 25s"},
		{name: "no worker matches the selector", give: base(func(e *explanation) {
			e.Definition = &sessionDefinition{IntervalMs: 1000, Selector: "zone=eu"}
			e.Ranking, e.Planned, e.Watcher, e.NoMatchingWorker = []rankedWorker{}, "", "", true
		}), wantReason: reasonNoMatchingWorker, wantWhy: "no live worker matches its selector zone=eu: nobody polls it"},
		{name: "no live worker", give: base(func(e *explanation) { e.Ranking, e.Planned, e.Watcher = nil, "", "" }),
			wantReason: reasonNoWorker, wantWhy: "unowned: there is no live worker"},
		{name: "quarantine", give: base(func(e *explanation) { e.Loss.QuarantineLeftMs = 12000 }),
			wantReason: reasonQuarantine, wantWhy: "waiting out the loss quarantine (a new keyspace, or Redis lost data): no free lease is taken until it ends in 12s"},
		{name: "marker missing", give: base(func(e *explanation) { e.Loss = lossFacts{ServerRunID: "r1"} }),
			wantReason: reasonLossDetected, wantWhy: "the loss marker is missing"},
		{name: "restarted", give: base(func(e *explanation) { e.Loss.ServerRunID = "r2" }),
			wantReason: reasonLossDetected, wantWhy: "Redis restarted or failed over since the loss marker was written (run id r1, now r2)"},
		{name: "unowned", give: base(func(*explanation) {}),
			wantReason: reasonUnowned, wantWhy: "the planned owner w1 takes it at its next round; if it does not, the watcher w2 adopts it after the orphan grace"},
		{name: "holder not live", give: base(held("ghost", func(l *leaseFacts) { l.Live, l.Current = false, false })),
			wantReason: reasonHolderNotLive, wantWhy: "held by ghost, which is not live (crashed or cut off without releasing); w1 takes it when the lease expires in 25s"},
		{name: "previous incarnation", give: base(held("w1", func(l *leaseFacts) { l.Current = false })),
			wantReason: reasonPreviousIncarnation, wantWhy: "previous incarnation (i1) of w1"},
		{name: "cordoned", give: base(held("w3", func(l *leaseFacts) { l.Cordoned = true })),
			wantReason: reasonCordoned, wantWhy: "w3 polls it but is cordoned"},
		{name: "orphan", give: base(held("w2")), wantReason: reasonOrphan, wantWhy: "orphan adopted by the watcher: w2 polls it"},
		{name: "held back", give: base(held("w3", func(l *leaseFacts) { l.AcquiredAgoMs = 10000 })),
			wantReason: reasonSettling, wantWhy: "w3 took it 10s ago and keeps it for one lease TTL unless the membership changes (settle rule); then it hands it to the planned owner w1, in about 20s"},
		{name: "contended", give: base(held("w3")),
			wantReason: reasonContended, wantWhy: "contended: w3 polls it but has not handed it off yet; the planned owner w1 takes it once w3 releases it"},
		{name: "contended, token not from the clock", give: base(held("w3", func(l *leaseFacts) { l.AcquiredAgoMs = -1 })),
			wantReason: reasonContended, wantWhy: "contended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, why := why(tt.give)
			require.Equal(t, tt.wantReason, reason)
			require.Contains(t, why, tt.wantWhy)
			require.NotContains(t, why, "\n")
		})
	}
}

func TestAcquiredAgo(t *testing.T) {
	now := time.UnixMicro(1_700_000_000_000_000)
	require.Equal(t, int64(1500), acquiredAgo(1_700_000_000_000_000-1_500_000, now))
	require.Equal(t, int64(-1), acquiredAgo(42, now), "a plain counter says nothing")
	require.Equal(t, int64(-1), acquiredAgo(1_700_000_000_000_000+1, now), "ahead of the clock")
	require.Equal(t, int64(-1), acquiredAgo(0, now))
}

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

func (f *explainFixture) explain(t *testing.T, id string) explanation {
	t.Helper()
	res := runApp(t, "explain", "--redis-url", f.url, "--json", id)
	require.Equal(t, exitOK, res.code, res.stderr)
	var e explanation
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
		require.Equal(t, reasonPreferred, e.Reason, e.Why)
		require.NotNil(t, e.Lease)
		require.True(t, e.Lease.Live && e.Lease.Current)
		require.Positive(t, e.Token)
		require.GreaterOrEqual(t, e.Lease.AcquiredAgoMs, int64(0), "the token is minted from the server clock")
		require.Greater(t, e.Lease.ExpiresInMs, int64(50000))

		res := runApp(t, "explain", "--redis-url", f.url, "s1")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Contains(t, res.stdout, "why:             preferred owner: "+e.Planned)
		require.Contains(t, res.stdout, "rendezvous owner, planned owner, holder")
	})
	t.Run("unowned, then quarantined, then a restart seen", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		require.Equal(t, reasonUnowned, e.Reason, e.Why)
		require.Nil(t, e.Lease)
		require.True(t, e.Loss.Present)
		require.NotEmpty(t, e.Loss.ServerRunID)

		marker := keyspace.Space{}.Epoch(0)
		now, err := f.client.Time(ctxT(t)).Result()
		require.NoError(t, err)
		require.NoError(t, f.client.Set(ctxT(t), marker, fmt.Sprintf("%s:%d", e.Loss.ServerRunID, now.UnixMilli()+60000), 0).Err())
		e = f.explain(t, "s1")
		require.Equal(t, reasonQuarantine, e.Reason, e.Why)
		require.Greater(t, e.Loss.QuarantineLeftMs, int64(50000))

		require.NoError(t, f.client.Set(ctxT(t), marker, "0123abcd:1", 0).Err())
		e = f.explain(t, "s1")
		require.Equal(t, reasonLossDetected, e.Reason, e.Why)
		require.Contains(t, e.Why, "run id 0123abcd")

		require.NoError(t, f.client.Del(ctxT(t), marker).Err())
		e = f.explain(t, "s1")
		require.Equal(t, reasonLossDetected, e.Reason, e.Why)
		require.Contains(t, e.Why, "loss marker is missing")
	})
	t.Run("no live worker", func(t *testing.T) {
		f := newExplainFixture(t)
		for _, reg := range f.regs {
			require.NoError(t, reg.Leave(ctxT(t)))
		}
		e := f.explain(t, "s1")
		require.Equal(t, reasonNoWorker, e.Reason, e.Why)
		require.Empty(t, e.Ranking)
	})
	t.Run("held by a worker that is not live", func(t *testing.T) {
		f := newExplainFixture(t)
		f.take(t, "s1", "ghost", "incghost")
		e := f.explain(t, "s1")
		require.Equal(t, reasonHolderNotLive, e.Reason, e.Why)
		require.Equal(t, "ghost", e.Lease.Holder)
		require.False(t, e.Lease.Live)
	})
	t.Run("held by a previous incarnation", func(t *testing.T) {
		f := newExplainFixture(t)
		f.take(t, "s1", "w2", "oldw2")
		e := f.explain(t, "s1")
		require.Equal(t, reasonPreviousIncarnation, e.Reason, e.Why)
		require.Equal(t, "oldw2", e.Lease.Incarnation)
		require.True(t, e.Lease.Live)
		require.False(t, e.Lease.Current)
	})
	t.Run("held by the watcher", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		f.take(t, "s1", e.Watcher, "inc"+e.Watcher)
		e = f.explain(t, "s1")
		require.Equal(t, reasonOrphan, e.Reason, e.Why)
	})
	t.Run("held by another worker that just took it", func(t *testing.T) {
		f := newExplainFixture(t)
		e := f.explain(t, "s1")
		other := e.Ranking[2].ID
		require.NotEqual(t, e.Planned, other)
		require.NotEqual(t, e.Watcher, other)
		f.take(t, "s1", other, "inc"+other)
		e = f.explain(t, "s1")
		require.Equal(t, reasonSettling, e.Reason, e.Why)
		// Once the lease is older than the (here 10 ms) lease TTL, the
		// hold-back is over: the holder should hand it off.
		require.Eventually(t, func() bool {
			res := runApp(t, "explain", "--redis-url", f.url, "--json", "--lease-ttl", "10ms", "s1")
			require.Equal(t, exitOK, res.code, res.stderr)
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &e))
			return e.Reason == reasonContended
		}, 5*time.Second, 5*time.Millisecond, "reason %s: %s", e.Reason, e.Why)
	})
	t.Run("a key of the wrong type", func(t *testing.T) {
		f := newExplainFixture(t)
		ks := keyspace.Space{}
		for _, key := range []string{ks.Lease("s1"), ks.Fence("s1"), ks.Released("s1")} {
			require.NoError(t, f.client.HSet(ctxT(t), key, "planted", "1").Err())
			e := f.explain(t, "s1")
			require.Equal(t, reasonBadKey, e.Reason, e.Why)
			require.Equal(t, key, e.BadKey.Key)
			require.Contains(t, e.Why, "wrong type hash")
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
		require.Equal(t, reasonPaused, f.explain(t, "p1").Reason)
		// Explained, but exit 1 as sessions get (issue 22: explain nope exited 0).
		res := runApp(t, "explain", "--redis-url", f.url, "--json", "nope")
		require.Equal(t, exitFailure, res.code, res.stderr)
		require.Equal(t, "pollworker: explain nope: no such session\n", res.stderr)
		var e explanation
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &e), res.stdout)
		require.Equal(t, reasonNotFound, e.Reason)
		require.False(t, e.Found)
		require.Len(t, e.Ranking, 3, "the ranking is shown anyway")
		require.NoError(t, f.client.Set(ctxT(t), keyspace.Space{}.Session("bad"), "not json", 0).Err())
		require.Equal(t, reasonMalformed, f.explain(t, "bad").Reason)
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
