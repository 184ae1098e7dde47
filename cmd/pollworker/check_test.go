package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// healthyFleet is an explainFixture with sessions s1..s6 added and every
// active session's lease held by its planned owner's live incarnation.
func healthyFleet(t *testing.T) *explainFixture {
	t.Helper()
	f := newExplainFixture(t)
	ctx := ctxT(t)
	store, err := session.NewStore(f.client, keyspace.Space{})
	require.NoError(t, err)
	for i := 2; i <= 6; i++ {
		id := fmt.Sprintf("s%d", i)
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://127.0.0.1:1/" + id, Interval: session.Duration(time.Second)}))
	}
	r, err := fleet.NewReader(f.client, keyspace.Space{}, fleetOptions(poller.DefaultLeaseTTL))
	require.NoError(t, err)
	snap, err := r.ReadAll(ctx)
	require.NoError(t, err)
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("s%d", i)
		owner := snap.OwnerOf(id)
		f.take(t, id, owner, "inc"+owner)
	}
	return f
}

// check runs pollworker check with args and decodes its JSON report.
func (f *explainFixture) check(t *testing.T, args ...string) (int, checkReport, string) {
	t.Helper()
	res := runApp(t, append([]string{"check", "--redis-url", f.url, "--json"}, args...)...)
	var r checkReport
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &r), res.stdout+res.stderr)
	return res.code, r, res.stderr
}

func problemChecks(r checkReport) []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, p.Check)
	}
	return out
}

func TestCheckHealthyFleet(t *testing.T) {
	f := healthyFleet(t)
	code, r, stderr := f.check(t, "--grace", "50ms", "--max-not-planned", "0")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, r.OK)
	require.Empty(t, r.Problems)
	require.ElementsMatch(t, allChecks, r.Checks)
	require.Equal(t, 3, r.Workers)
	require.Equal(t, 6, r.Sessions)
	require.Equal(t, 6, r.Leases)

	res := runApp(t, "check", "--redis-url", f.url, "--grace", "0")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "note: duplicate-id: skipped with --grace 0")
	require.Contains(t, res.stdout, "ok: 13 checks")
	require.Empty(t, res.stderr)
}

// TestCheckBrokenInvariants breaks each invariant on purpose: check exits
// 3 and names it.
func TestCheckBrokenInvariants(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		breakIt func(t *testing.T, f *explainFixture)
		want    string
	}{
		{name: "holder not live", want: checkHolderNotLive, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.Del(ctxT(t), keyspace.Space{}.Lease("s1")).Err())
			f.take(t, "s1", "ghost", "incghost")
		}},
		{name: "previous incarnation", want: checkPrevious, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.Del(ctxT(t), keyspace.Space{}.Lease("s2")).Err())
			f.take(t, "s2", "w1", "oldw1")
		}},
		{name: "lease of an unknown session", want: checkUnknownSession, breakIt: func(t *testing.T, f *explainFixture) {
			f.take(t, "gone", "w1", "incw1")
		}},
		{name: "session without lease", args: []string{"--grace", "50ms"}, want: checkNoLease, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.Del(ctxT(t), keyspace.Space{}.Lease("s3")).Err())
		}},
		{name: "not the planned owner", args: []string{"--max-not-planned", "0"}, want: checkNotPlanned, breakIt: func(t *testing.T, f *explainFixture) {
			e := f.explain(t, "s4")
			require.NoError(t, f.client.Del(ctxT(t), keyspace.Space{}.Lease("s4")).Err())
			other := e.Ranking[2].ID
			if other == e.Planned {
				other = e.Ranking[1].ID
			}
			f.take(t, "s4", other, "inc"+other)
		}},
		{name: "eviction policy", want: checkEviction, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.ConfigSet(ctxT(t), "maxmemory-policy", "volatile-lru").Err())
		}},
		{name: "redis at its maxmemory", want: checkRedisMemory, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.ConfigSet(ctxT(t), "maxmemory", "1").Err())
			t.Cleanup(func() { _ = f.client.ConfigSet(context.Background(), "maxmemory", "0").Err() })
		}},
		{name: "lease key of the wrong type", want: checkBadKey, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.Del(ctxT(t), keyspace.Space{}.Lease("s3")).Err())
			require.NoError(t, f.client.HSet(ctxT(t), keyspace.Space{}.Lease("s3"), "planted", "1").Err())
		}},
		{name: "fencing token too large", want: checkBadKey, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.HSet(ctxT(t), keyspace.Space{}.Fencing("s5"), keyspace.FieldToken, "9007199254740993").Err())
		}},
		{name: "state of the wrong type", want: checkCorruptState, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.Set(ctxT(t), keyspace.Space{}.State("s2"), "garbage", 0).Err())
		}},
		{name: "state with a garbage token", want: checkCorruptState, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.HSet(ctxT(t), keyspace.Space{}.State("s2"), "data", "{}", "token", "garbage").Err())
		}},
		{name: "malformed session", want: checkMalformed, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.Set(ctxT(t), keyspace.Space{}.Session("s6"), `{"url":"","interval":"1s"}`, 0).Err())
		}},
		{name: "junk member", want: checkJunkMember, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.ZAdd(ctxT(t), keyspace.Space{}.NodeIndex(), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "bad id"}).Err())
		}},
		{name: "index sizes", want: checkIndexSizes, breakIt: func(t *testing.T, f *explainFixture) {
			require.NoError(t, f.client.HIncrBy(ctxT(t), keyspace.Space{}.SessionSizes(), fmt.Sprint(keyspace.BucketOf("s5")), 1).Err())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthyFleet(t)
			tt.breakIt(t, f)
			args := tt.args
			if len(args) == 0 || args[0] != "--grace" {
				args = append(args, "--grace", "0")
			}
			code, r, stderr := f.check(t, args...)
			require.Equal(t, exitUnhealthy, code, stderr)
			require.False(t, r.OK)
			require.Equal(t, []string{tt.want}, problemChecks(r), "%+v", r.Problems)
			oneLine(t, stderr)
			require.Contains(t, stderr, "pollworker: check: 1 problems: "+tt.want)

			res := runApp(t, append([]string{"check", "--redis-url", f.url}, args...)...)
			require.Equal(t, exitUnhealthy, res.code)
			require.True(t, strings.HasPrefix(res.stdout, tt.want+": "), res.stdout)
		})
	}
}

// TestCheckDuplicateID: a lease of a live id under another incarnation
// than its heartbeat's, renewed between the two reads, is two processes
// running with one id; the same lease left to expire is a previous
// incarnation.
func TestCheckDuplicateID(t *testing.T) {
	f := healthyFleet(t)
	require.NoError(t, f.client.Del(ctxT(t), keyspace.Space{}.Lease("s6")).Err())
	m, err := lease.New(lease.Config{Client: f.client, Holder: "w3", Incarnation: "other", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	for _, r := range m.Acquire(ctxT(t), []string{"s6"}) {
		require.NoError(t, r.Err)
	}

	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the other process: renews every 20ms
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m.RenewAll(ctx)
			}
		}
	}()
	code, r, stderr := f.check(t, "--grace", "500ms")
	cancel()
	wg.Wait()
	require.Equal(t, exitUnhealthy, code, stderr)
	require.Equal(t, []string{checkDuplicateID}, problemChecks(r), "%+v", r.Problems)
	require.Contains(t, r.Problems[0].Detail, "id w3: its heartbeat is incarnation incw3, but incarnation other renewed the lease of session s6")

	// Not renewed any more: a previous incarnation waiting for its TTL.
	code, r, _ = f.check(t, "--grace", "100ms")
	require.Equal(t, exitUnhealthy, code)
	require.Equal(t, []string{checkPrevious}, problemChecks(r), "%+v", r.Problems)
}

func TestCheckBadFlags(t *testing.T) {
	for _, tt := range []struct{ args []string }{
		{[]string{"check", "--grace", "-1s"}},
		{[]string{"check", "--max-not-planned", "-2"}},
	} {
		res := runApp(t, tt.args...)
		require.Equal(t, exitUsage, res.code)
		oneLine(t, res.stderr)
		require.Contains(t, res.stderr, "pollworker: check: --")
	}
}

// TestCheckAnnouncesGrace: check says on stderr what it waits for before
// its --grace (issue 22: it was silent for 20 s).
func TestCheckAnnouncesGrace(t *testing.T) {
	f := newExplainFixture(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"pollworker", "check", "--redis-url", f.url, "--grace", "1m"}, &stdout, &stderr, nil)
	}()
	const want = "pollworker: check: read 3 live workers, 1 active session and 0 leases; reading again in 1m0s (--grace): " +
		"a session counts as without a lease only if it has none at both reads\n"
	require.Eventually(t, func() bool { return stderr.String() != "" }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, want, stderr.String())
	select {
	case <-done:
		t.Fatal("check ended before its grace")
	default:
	}
	cancel()
	<-done
	require.Empty(t, stdout.String())
}

func TestMemoryProblem(t *testing.T) {
	info := func(used, limit int, policy string) string {
		return fmt.Sprintf("# Memory\r\nused_memory:%d\r\nused_memory_human:1M\r\nmaxmemory:%d\r\nmaxmemory_policy:%s\r\n", used, limit, policy)
	}
	for _, tt := range []struct {
		name string
		info string
		want string
	}{
		{"no maxmemory", info(5000, 0, "noeviction"), ""},
		{"below", info(5000, 6000, "noeviction"), ""},
		{"at it", info(6000, 6000, "noeviction"), "Redis uses 6000 of its maxmemory 6000 bytes (noeviction): it refuses writes"},
		{"above, evicting", info(7000, 6000, "allkeys-lru"), ""},
		{"unreadable", "# Memory\r\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := memoryProblem(tt.info)
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tt.want)
		})
	}
}

// TestCheckBadBucketAdvice: an index bucket of the wrong type is reported
// as a bucket, with what to do about a bucket (delete or rename it, apply
// the sessions again), not a session's advice (it said "write it again
// (sessions add --replace)", which cannot write into it).
func TestCheckBadBucketAdvice(t *testing.T) {
	f := healthyFleet(t)
	bucket := keyspace.Space{}.SessionBucket(keyspace.BucketOf("s3"))
	require.NoError(t, f.client.Del(ctxT(t), bucket).Err())
	require.NoError(t, f.client.Set(ctxT(t), bucket, "junk", 0).Err())
	code, r, stderr := f.check(t, "--grace", "0")
	require.Equal(t, exitUnhealthy, code, stderr)
	var detail string
	for _, p := range r.Problems {
		if p.Check == checkMalformed {
			detail = p.Detail
		}
	}
	require.Contains(t, detail, "index bucket key "+bucket+" is not a set")
	require.Contains(t, detail, "delete or rename the key, then apply the sessions again")
	require.NotContains(t, detail, "sessions add --replace")
}

// TestCheckBadFleetKey: a node index or cordon set of the wrong type is a
// problem (exit 3) naming the key, not a failure to read (exit 1, as for
// Redis unreachable, which cron could not tell from it).
func TestCheckBadFleetKey(t *testing.T) {
	for _, key := range []string{keyspace.Space{}.Cordoned(), keyspace.Space{}.NodeIndex()} {
		t.Run(key, func(t *testing.T) {
			f := healthyFleet(t)
			require.NoError(t, f.client.Del(ctxT(t), key).Err())
			require.NoError(t, f.client.Set(ctxT(t), key, "junk", 0).Err())
			code, r, stderr := f.check(t, "--grace", "0")
			require.Equal(t, exitUnhealthy, code, stderr)
			require.Equal(t, []string{checkBadFleetKey}, problemChecks(r), "%+v", r.Problems)
			require.Contains(t, r.Problems[0].Detail, "key "+key+" has the wrong type")
		})
	}
}

// TestCheckNotesAnEmptyIndex: live workers and no session (a FLUSHALL,
// then the workers' heartbeats came back) is said in a note: check said
// only "ok … 0 active sessions".
func TestCheckNotesAnEmptyIndex(t *testing.T) {
	f := newExplainFixture(t)
	store, err := session.NewStore(f.client, keyspace.Space{})
	require.NoError(t, err)
	for _, id := range []string{"s1", "p1"} {
		require.NoError(t, store.Delete(ctxT(t), id))
	}
	code, r, stderr := f.check(t, "--grace", "0")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, strings.Join(r.Notes, "\n"), "no session: 3 live workers, and the session index under session is empty")
}
