package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

func TestSettledMaster(t *testing.T) {
	const master = "# Server\r\nrun_id:abc123\r\nuptime_in_seconds:5\r\n# Replication\r\nrole:master\r\nmaster_replid2:0000\r\nsecond_repl_offset:-1\r\n"
	tests := []struct {
		name   string
		give   string
		wantID string
		wantOK bool
	}{
		{"master since it started", master, "abc123", true},
		{"promoted from replica (a failover)", strings.Replace(master, "second_repl_offset:-1", "second_repl_offset:4711", 1), "abc123", false},
		{"a replica", strings.Replace(master, "role:master", "role:slave", 1), "abc123", false},
		{"no run id", strings.Replace(master, "run_id:abc123", "", 1), "", false},
		{"no replication section", "# Server\r\nrun_id:abc123\r\n", "abc123", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := settledMaster(tt.give)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.wantID, id)
		})
	}
}

// markerScript runs acquire.lua for session s with the loss marker of slot
// 0 and its confirmation time, a quarantine of an hour, and argv after it
// (the masters' run ids, or "-"). It returns the raw reply.
func markerScript(t *testing.T, c *redis.Client, s string, argv ...any) []any {
	t.Helper()
	keys := []string{realKeys.Lease(s), realKeys.Fencing(s), realKeys.Epoch(0), realKeys.EpochTokens(0), realKeys.EpochConfirmed(0)}
	masters := make([]string, len(argv))
	for i, a := range argv {
		masters[i] = fmt.Sprint(a)
	}
	ids := strings.Join(masters, " ")
	if len(argv) > 0 && ids == "" {
		ids = " " // none
	}
	args := []any{int64(10000), int64(time.Hour / time.Millisecond), ids, "a#" + s, 1}
	raw, err := redis.NewScript(lua.Acquire).Run(context.Background(), c, keys, args...).Slice()
	require.NoError(t, err)
	return raw
}

// serverMs is the Redis server's clock in ms.
func serverMs(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	return now.UnixMilli()
}

// TestRealMovedMarkerRules: a loss marker of another run id counts as moved
// (no quarantine) only when its writer is a settled master, this server
// was never promoted, and it started before the marker's confirmation
// time; otherwise it is a loss, as before. With "-" the script asks for
// the masters and writes nothing.
func TestRealMovedMarkerRules(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	c := primary.Client(t)
	promoted := redistest.Start(t)
	p := promoted.Client(t)
	ctx := context.Background()
	require.NoError(t, p.SlaveOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port)).Err())
	require.Eventually(t, func() bool {
		return strings.Contains(p.Info(ctx, "replication").Val(), "master_link_status:up")
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, p.SlaveOf(ctx, "NO", "ONE").Err()) // promoted, as by a failover

	const writer = "0123456789abcdef0123456789abcdef01234567"
	later := func(c *redis.Client) string { return strconv.FormatInt(serverMs(t, c)+10000, 10) }
	earlier := func(c *redis.Client) string { return strconv.FormatInt(serverMs(t, c)-60000, 10) }
	tests := []struct {
		name      string
		server    *redis.Client
		confirmed func(*redis.Client) string // "" for none
		argv      []any
		want      string // "moved", "loss" or "ask"
	}{
		{"settled writer, confirmed after this server started", c, later, []any{"other", writer}, "moved"},
		{"asked: the caller gathers the masters", c, later, []any{"-"}, "ask"},
		{"writer not a settled master now (restarted, failed over, gone)", c, later, []any{"other"}, "loss"},
		{"no masters known", c, later, []any{""}, "loss"},
		{"caller passes no masters (not Cluster)", c, later, nil, "loss"},
		{"no confirmation time (a marker of an older version)", c, nil, []any{writer}, "loss"},
		{"this server started after the confirmation (restarted since the move)", c, earlier, []any{writer}, "loss"},
		{"this server was promoted from replica (a failover)", p, later, []any{writer}, "loss"},
		{"promoted server, asked: no need to ask", p, later, []any{"-"}, "loss"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fmt.Sprintf("s%d", i)
			require.NoError(t, tt.server.FlushAll(ctx).Err())
			require.NoError(t, tt.server.Set(ctx, realKeys.Epoch(0), writer+":0", 0).Err())
			if tt.confirmed != nil {
				require.NoError(t, tt.server.Set(ctx, realKeys.EpochConfirmed(0), tt.confirmed(tt.server), 0).Err())
			}
			runID := infoField(tt.server.Info(ctx, "server").Val(), "run_id")
			raw := markerScript(t, tt.server, s, tt.argv...)
			marker := tt.server.Get(ctx, realKeys.Epoch(0)).Val()
			switch tt.want {
			case "ask":
				require.Equal(t, []any{askMasters}, raw)
				require.Equal(t, writer+":0", marker, "nothing written")
				require.Zero(t, tt.server.Exists(ctx, realKeys.Lease(s)).Val())
			case "moved":
				require.Positive(t, raw[0], "acquired: no quarantine")
				require.Equal(t, runID+":0", marker, "this server's now, the same quarantine end")
			case "loss":
				require.Equal(t, []any{int64(0), raw[1], "<quarantine>", int64(0)}, raw)
				require.True(t, strings.HasPrefix(marker, runID+":"), marker)
				require.NotEqual(t, runID+":0", marker, "a new quarantine")
			}
			at, err := tt.server.Get(ctx, realKeys.EpochConfirmed(0)).Int64()
			if tt.want != "ask" {
				require.NoError(t, err)
				require.InDelta(t, serverMs(t, tt.server), at, 5000, "confirmed now")
			}
		})
	}
}

// TestRealClusterReshardIsNotALoss: a slot migrated to another master
// (resharding) carries its loss marker with the old master's run id; the
// next acquisition in that slot counts it as moved, not as a data loss, so
// nothing waits a quarantine; the lease migrated with it is still renewed.
// While the old master does not answer, the acquisition waits rather than
// read the move as a loss.
func TestRealClusterReshardIsNotALoss(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	nodes := make([]*redis.Client, len(cl.Servers))
	for i, s := range cl.Servers {
		nodes[i] = s.Client(t)
		// this master must have started 2 s before the marker is confirmed
		require.Eventually(t, func() bool {
			up := infoField(nodes[i].Info(ctx, "server").Val(), "uptime_in_seconds")
			n, _ := strconv.Atoi(up)
			return n >= 3
		}, 20*time.Second, 50*time.Millisecond)
	}
	_, err := MarkFresh(ctx, cc, realKeys)
	require.NoError(t, err)
	m, err := New(Config{Client: cc, Holder: "w1", TTL: 10 * time.Second, LossQuarantine: time.Hour})
	require.NoError(t, err)

	l := acquireOne(t, m, "s").Lease
	require.NotNil(t, l)
	slot := keyspace.Slot(realKeys.Lease("s"))
	from := cl.SlotOwner(t, slot)
	to := (from + 1) % len(nodes)
	cl.MigrateSlot(t, slot, to)
	require.Equal(t, to, cl.SlotOwner(t, slot))
	require.NotEqual(t, infoField(nodes[from].Info(ctx, "server").Val(), "run_id"),
		infoField(nodes[to].Info(ctx, "server").Val(), "run_id"))

	// The old master does not answer for a while (paused: its INFO times
	// out): the move cannot be told from a loss, so nothing is written
	// and the session is not taken now; the marker keeps naming the old
	// master, and no quarantine starts.
	other := sessionInSlot(t, slot, "s")
	marker := nodes[to].Get(ctx, realKeys.Epoch(slot)).Val()
	quick := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = quick.Close() })
	mq, err := New(Config{Client: quick, Holder: "w2", TTL: 10 * time.Second, LossQuarantine: time.Hour})
	require.NoError(t, err)
	require.NoError(t, quick.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
	require.NoError(t, nodes[from].Do(ctx, "client", "pause", 1500, "all").Err())
	res := mq.Acquire(ctx, []string{other})[0]
	require.ErrorIs(t, res.Err, errMastersUnread)
	require.False(t, res.Quarantined)
	require.Nil(t, res.Lease)
	require.Equal(t, marker, nodes[to].Get(ctx, realKeys.Epoch(slot)).Val(), "the marker is left as it was")
	require.Eventually(t, func() bool { return nodes[from].Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)

	res = acquireOne(t, m, other)
	require.NoError(t, res.Err)
	require.False(t, res.Quarantined, "a migration is not a loss")
	require.NotNil(t, res.Lease)
	require.Equal(t, 2, m.RenewAll(ctx).Renewed, "the migrated lease is still ours")
	require.True(t, strings.HasPrefix(nodes[to].Get(ctx, realKeys.Epoch(slot)).Val(), infoField(nodes[to].Info(ctx, "server").Val(), "run_id")+":"),
		"the marker now names the new master")
}

func infoField(text, field string) string { return infoFields(text)[field] }

// sessionInSlot returns a session id other than not whose lease is in slot.
func sessionInSlot(t *testing.T, slot uint16, not string) string {
	t.Helper()
	for i := 0; ; i++ {
		id := "x" + strconv.Itoa(i)
		if id != not && keyspace.Slot(realKeys.Lease(id)) == slot {
			return id
		}
	}
}
