package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

func TestUncertainYoung(t *testing.T) {
	a, b, c, d := &Lease{session: "a"}, &Lease{session: "b"}, &Lease{session: "c"}, &Lease{session: "d"}
	slots := map[*Lease]uint16{a: 1, b: 2, c: 2, d: 3}
	masters := map[uint16]string{1: "m1", 2: "m2"} // slot 3: the client cannot name its master
	tests := []struct {
		name   string
		failed map[string]bool
		want   []*Lease
	}{
		{"a failed master stops its own young leases", map[string]bool{"m2": true}, []*Lease{b, c, d}},
		{"another master's leases keep their deadline", map[string]bool{"m9": true}, []*Lease{d}},
		{"every master failed", map[string]bool{"m1": true, "m2": true}, []*Lease{a, b, c, d}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			got := uncertainYoung([]*Lease{a, b, c, d},
				func(l *Lease) uint16 { return slots[l] },
				func(l *Lease) (string, bool) {
					asked++
					m, ok := masters[slots[l]]
					return m, ok
				}, tt.failed)
			require.Equal(t, tt.want, got)
			require.Equal(t, 3, asked, "once per slot")
		})
	}
}

// TestRealClusterFailedMasterStopsOnlyItsYoungLeases: under Redis Cluster,
// a renewal cycle in which one master does not answer makes Uncertain the
// leases on that master, young or not, and leaves the young leases on the
// masters that answered Held with their deadlines; the next cycle, with
// the master back, renews them all. With one Redis server every young
// lease of a failed cycle turns Uncertain (TestRenewSkipsYoungHeldLeases).
func TestRealClusterFailedMasterStopsOnlyItsYoungLeases(t *testing.T) {
	t.Parallel()
	cl, quick := threeMasters(t)
	ctx := context.Background()
	// An old and a young session on each master.
	old, young := onEachMaster(t, cl, "y"), onEachMaster(t, cl, "o")
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m, err := New(Config{Client: quick, Holder: "w", TTL: time.Minute, MinRenewAge: 10 * time.Second, Clock: clock, LossQuarantine: -1})
	require.NoError(t, err)
	leases := func(ids []string) []*Lease {
		var out []*Lease
		for _, r := range m.Acquire(ctx, ids) {
			require.NoError(t, r.Err)
			require.NotNil(t, r.Lease)
			out = append(out, r.Lease)
		}
		return out
	}
	olds := leases(old)
	require.Equal(t, 3, m.RenewAll(ctx).Renewed, "the renew script is loaded on every master")
	clock.Step(20 * time.Second) // local time only: the keys live a real minute
	youngs := leases(young)
	deadlines := []time.Time{youngs[1].Deadline(), youngs[2].Deadline()}

	// Master 0 answers nobody for a while: its renewals fail, and go-redis
	// fails every command of a Cluster pipeline whose retry the deadline
	// cut short (replies received included): each master has pipelines of
	// its own.
	paused, rep := renewWithMasterPaused(t, cl, m)
	require.Equal(t, 3, rep.Young)
	require.ElementsMatch(t, []*Lease{olds[0], youngs[0]}, rep.Uncertain)
	require.Equal(t, 2, rep.Renewed, "the old leases of the other masters")
	for i, l := range youngs[1:] {
		require.Equal(t, Held, l.State(), l.Session())
		require.NoError(t, l.Context().Err())
		require.Equal(t, deadlines[i], l.Deadline())
	}
	for _, l := range []*Lease{olds[0], youngs[0]} {
		require.Equal(t, Uncertain, l.State(), l.Session())
		require.Error(t, l.Context().Err(), "the poll under %s is cancelled", l.Session())
	}

	require.Eventually(t, func() bool { return paused.Ping(ctx).Err() == nil }, 20*time.Second, 50*time.Millisecond)
	rep = m.RenewAll(ctx)
	require.NoError(t, rep.Err)
	require.Equal(t, Held, olds[0].State())
	require.Equal(t, Held, youngs[0].State())
}

// TestRealClusterScriptLoadedWhileAnotherMasterIsDown: a master that does
// not know the renew script (a replica just promoted: SCRIPT FLUSH here)
// gets it loaded and its leases renewed in the same cycle, while another
// master does not answer: each master's pipeline resends its own NOSCRIPT
// calls at once. Before, they were resent after every pipeline returned,
// the paused master's at the cycle's deadline, too late to load anything.
func TestRealClusterScriptLoadedWhileAnotherMasterIsDown(t *testing.T) {
	t.Parallel()
	cl, cc := threeMasters(t)
	ctx := context.Background()
	ids := onEachMaster(t, cl, "z")
	m, err := New(Config{Client: cc, Holder: "w", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	var leases []*Lease
	for _, r := range m.Acquire(ctx, ids) {
		require.NoError(t, r.Err)
		leases = append(leases, r.Lease)
	}
	require.Equal(t, 3, m.RenewAll(ctx).Renewed, "the renew script is loaded on every master")

	require.NoError(t, cl.Servers[1].Client(t).ScriptFlush(ctx).Err())
	paused, rep := renewWithMasterPaused(t, cl, m)
	require.Equal(t, 2, rep.Renewed, "master 1 (script loaded again) and master 2")
	require.Equal(t, []*Lease{leases[0]}, rep.Uncertain)
	require.Equal(t, Held, leases[1].State())
	require.Eventually(t, func() bool { return paused.Ping(ctx).Err() == nil }, 20*time.Second, 50*time.Millisecond)
}

// threeMasters starts a cluster of 3 masters and returns it with a client
// of go-redis's defaults (3 s read timeout, 3 redirects) whose requests
// are bounded by their contexts, as the workers' are: a paused master's
// request ends at the cycle's deadline, and its retry is cut short.
func threeMasters(t *testing.T) (*redistest.Cluster, *redis.ClusterClient) {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	require.NoError(t, cc.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	return cl, cc
}

// onEachMaster returns a session id (prefix and a number) whose lease is
// on each master of cl, by index.
func onEachMaster(t *testing.T, cl *redistest.Cluster, prefix string) []string {
	t.Helper()
	ids := make([]string, len(cl.Servers))
	for i, found := 0, 0; found < len(ids); i++ {
		id := prefix + strconv.Itoa(i)
		if owner := cl.SlotOwner(t, keyspace.Slot(realKeys.Lease(id))); ids[owner] == "" {
			ids[owner] = id
			found++
		}
	}
	return ids
}

// renewWithMasterPaused pauses master 0 of cl for 4 s (CLIENT PAUSE ALL)
// and runs one renewal cycle of m bounded by 1 s, which fails; it returns
// a client of master 0 and the cycle's report.
func renewWithMasterPaused(t *testing.T, cl *redistest.Cluster, m *Manager) (*redis.Client, RenewReport) {
	t.Helper()
	ctx := context.Background()
	paused := cl.Servers[0].Client(t)
	require.NoError(t, paused.Do(ctx, "client", "pause", 4000, "all").Err())
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rep := m.RenewAll(cctx)
	require.Error(t, rep.Err)
	return paused, rep
}
