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
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	// go-redis's defaults (3 s read timeout, 3 redirects) and a cycle
	// bounded by its context, as the workers run it: the paused master's
	// request ends at the deadline, and its retry is cut short.
	quick := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = quick.Close() })
	require.NoError(t, quick.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))

	// An old and a young session on each master.
	old, young := make([]string, 3), make([]string, 3)
	for i := 0; old[0] == "" || old[1] == "" || old[2] == "" || young[0] == "" || young[1] == "" || young[2] == ""; i++ {
		id := "y" + strconv.Itoa(i)
		owner := cl.SlotOwner(t, keyspace.Slot(realKeys.Lease(id)))
		if old[owner] == "" {
			old[owner] = id
		} else if young[owner] == "" {
			young[owner] = id
		}
	}
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
	paused := cl.Servers[0].Client(t)
	require.NoError(t, paused.Do(ctx, "client", "pause", 4000, "all").Err())
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	rep := m.RenewAll(cctx)
	cancel()
	require.Error(t, rep.Err)
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
