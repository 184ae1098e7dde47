package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// savedBackoff is the saved state a test poller writes: what
// Options.Backoff decodes.
type savedBackoff struct {
	Failures int       `json:"failures"`
	Polled   time.Time `json:"polled"`
	WaitMs   int64     `json:"wait_ms"`
}

func decodeBackoff(data []byte) (Backoff, bool) {
	var s savedBackoff
	if json.Unmarshal(data, &s) != nil || s.Failures == 0 {
		return Backoff{}, false
	}
	return Backoff{Failures: s.Failures, Last: "503", Polled: s.Polled, Wait: time.Duration(s.WaitMs) * time.Millisecond}, true
}

// redisFleet is one keyspace of a real redis-server with workers,
// sessions and leases written by the packages that write them.
type redisFleet struct {
	t      *testing.T
	ctx    context.Context
	client *redis.Client
	keys   keyspace.Space
}

func (f redisFleet) join(id, incarnation string, labels nodes.Labels) {
	reg, err := nodes.New(nodes.Config{Client: f.client, Keys: f.keys, ID: id, TTL: time.Minute, Incarnation: incarnation, Labels: labels})
	require.NoError(f.t, err)
	require.NoError(f.t, reg.Heartbeat(f.ctx))
}

func (f redisFleet) put(s session.Session) {
	store, err := session.NewStore(f.client, f.keys)
	require.NoError(f.t, err)
	s.URL, s.Interval = "http://127.0.0.1:1/"+s.ID, session.Duration(2*time.Second)
	require.NoError(f.t, store.Put(f.ctx, s))
}

// take acquires session id as holder's incarnation; quarantine is the
// manager's LossQuarantine (-1: none).
func (f redisFleet) take(id, holder, incarnation string, quarantine time.Duration) *lease.Lease {
	m, err := lease.New(lease.Config{Client: f.client, Keys: f.keys, Holder: holder, Incarnation: incarnation, TTL: time.Minute, LossQuarantine: quarantine})
	require.NoError(f.t, err)
	r := m.Acquire(f.ctx, []string{id})[0]
	require.NoError(f.t, r.Err)
	return r.Lease
}

func (f redisFleet) read(id string) *Snapshot {
	r, err := NewReader(f.client, f.keys, Options{BalanceSlack: 0.05, LeaseTTL: time.Minute, Backoff: decodeBackoff})
	require.NoError(f.t, err)
	s, err := r.Read(f.ctx, id)
	require.NoError(f.t, err)
	return s
}

// TestReasonsOnRealRedis: what Explain says of a session quarantined,
// backed off, unplaceable, cordoned away or held by a previous incarnation,
// read from a real redis-server where the workers' packages wrote it.
func TestReasonsOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	prefix := 0
	for _, tc := range []struct {
		name       string
		setup      func(f redisFleet)
		wantReason string
		wantWhy    string
		check      func(t *testing.T, e Explanation)
	}{
		{name: "quarantined", setup: func(f redisFleet) {
			f.join("w1", "i1", nil)
			f.put(session.Session{ID: "s1"})
			// A keyspace without its loss marker (new, or lost): the first
			// acquisition starts the quarantine and takes nothing.
			require.Nil(t, f.take("s1", "w1", "i1", time.Minute))
		}, wantReason: ReasonQuarantine, wantWhy: "waiting out the loss quarantine"},
		{name: "backed off", setup: func(f redisFleet) {
			f.join("w1", "i1", nil)
			f.put(session.Session{ID: "s1"})
			l := f.take("s1", "w1", "i1", -1)
			require.NotNil(t, l)
			data, err := json.Marshal(savedBackoff{Failures: 4, Polled: time.Now(), WaitMs: 8000})
			require.NoError(t, err)
			_, err = state.NewStore(f.client, f.keys).Save(f.ctx, l, time.Now(), data)
			require.NoError(t, err)
		}, wantReason: ReasonPreferred, check: func(t *testing.T, e Explanation) {
			require.NotNil(t, e.NextPoll)
			require.Contains(t, e.NextPoll.Why, "backing off: 4 polls failed in a row (last 503), so it waits 8s more than its interval")
			require.Greater(t, e.NextPoll.DueInMs, int64(5000))
		}},
		{name: "unplaceable", setup: func(f redisFleet) {
			f.join("w1", "i1", nodes.Labels{"zone": "eu"})
			f.put(session.Session{ID: "s1", Selector: "zone=mars"})
		}, wantReason: ReasonNoMatchingWorker, wantWhy: "no live worker matches its selector zone=mars"},
		{name: "cordoned away", setup: func(f redisFleet) {
			f.join("w1", "i1", nil)
			f.join("w2", "i2", nil)
			f.put(session.Session{ID: "s1"})
			owner := f.read("s1").OwnerOf("s1")
			require.NotNil(t, f.take("s1", owner, map[string]string{"w1": "i1", "w2": "i2"}[owner], -1))
			require.NoError(t, nodes.Cordon(f.ctx, f.client, f.keys, owner))
		}, wantReason: ReasonCordoned, wantWhy: "polls it but is cordoned, so it hands it to the planned owner", check: func(t *testing.T, e Explanation) {
			require.True(t, e.Lease.Cordoned)
			require.NotEqual(t, e.Lease.Holder, e.Planned, "planned on the other worker")
			require.Len(t, e.Ranking, 1, "a cordoned worker is not ranked")
		}},
		{name: "index bucket of the wrong type", setup: func(f redisFleet) {
			f.join("w1", "i1", nil)
			f.put(session.Session{ID: "s1"})
			bucket := f.keys.SessionBucket(keyspace.BucketOf("s1"))
			require.NoError(t, f.client.Del(f.ctx, bucket).Err())
			require.NoError(t, f.client.Set(f.ctx, bucket, "junk", 0).Err())
		}, wantReason: ReasonBadBucket, wantWhy: "is not a set (written around pollworker), so the workers read it as empty"},
		{name: "not in its index bucket", setup: func(f redisFleet) {
			f.join("w1", "i1", nil)
			f.put(session.Session{ID: "s1"})
			require.NoError(t, f.client.SRem(f.ctx, f.keys.SessionBucket(keyspace.BucketOf("s1")), "s1").Err())
		}, wantReason: ReasonNotIndexed, wantWhy: "its definition is stored but its id is not in its index bucket"},
		{name: "held by a previous incarnation", setup: func(f redisFleet) {
			f.put(session.Session{ID: "s1"})
			require.NotNil(t, f.take("s1", "w1", "old", -1))
			f.join("w1", "new", nil)
		}, wantReason: ReasonPreviousIncarnation, wantWhy: "held by a previous incarnation (old) of w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix++ // a keyspace of its own: its own loss marker
			f := redisFleet{t: t, ctx: context.Background(), client: client, keys: keyspace.Space{Prefix: fmt.Sprintf("case%d", prefix), SessionPrefix: fmt.Sprintf("case%d-session", prefix)}}
			if tc.name != "quarantined" {
				_, err := lease.MarkFresh(f.ctx, client, f.keys)
				require.NoError(t, err)
			}
			tc.setup(f)
			e := f.read("s1").Explain("s1")
			require.Equal(t, tc.wantReason, e.Reason, e.Why)
			require.Contains(t, e.Why, tc.wantWhy)
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// TestReadIsBounded: a Snapshot of 300 sessions costs the round
// trips of one (a script's first call may add a SCRIPT LOAD, so each read
// is made twice and the second counted).
func TestReadIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	rt := &roundTrips{}
	client.AddHook(rt)
	f := redisFleet{t: t, ctx: context.Background(), client: client, keys: keyspace.Space{}}
	_, err := lease.MarkFresh(f.ctx, client, f.keys)
	require.NoError(t, err)
	f.join("w1", "i1", nil)
	f.join("w2", "i2", nil)
	var ids []string
	for i := range 300 {
		id := fmt.Sprintf("s%04d", i)
		f.put(session.Session{ID: id})
		ids = append(ids, id)
	}
	r, err := NewReader(client, f.keys, Options{BalanceSlack: 0.05, LeaseTTL: time.Minute, Backoff: decodeBackoff})
	require.NoError(t, err)
	cost := func(read func() error) int64 {
		require.NoError(t, read())
		before := rt.n.Load()
		require.NoError(t, read())
		return rt.n.Load() - before
	}
	one := cost(func() error { _, err := r.Read(f.ctx, ids[0]); return err })
	many := cost(func() error { _, err := r.Read(f.ctx, ids...); return err })
	all := cost(func() error { _, err := r.ReadAll(f.ctx); return err })
	fleetOnly := cost(func() error { _, err := r.ReadFleet(f.ctx); return err })
	t.Logf("round trips: ReadFleet %d, Read(1) %d, Read(300) %d, ReadAll(300) %d", fleetOnly, one, many, all)
	require.Equal(t, one, many, "reading 300 sessions costs what reading one does")
	require.LessOrEqual(t, one, int64(12))
	require.LessOrEqual(t, fleetOnly, int64(4))
}
