package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRealUpgradeInPlace: a keyspace of the layout before the fencing
// records (a fencing counter and a handoff mark per session, a loss marker
// without ":2") keeps its guarantees under the new scripts: tokens keep
// increasing above every old counter (even one ahead of the clock, even a
// plain counter), an old handoff mark keeps its gap and its schedule, the
// old keys are deleted once the record holds the token, Inspect reads them
// until then, and the next handoff runs on the records alone.
func TestRealUpgradeInPlace(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	r.upgraded(t)
	now := r.rdb.Time(ctx).Val()
	ahead := now.Add(time.Hour).UnixMicro() // a counter ahead of the clock
	marked := now.Add(-time.Minute).UnixMicro()
	require.NoError(t, r.rdb.Set(ctx, realKeys.Fence("ahead"), ahead, 0).Err())
	require.NoError(t, r.rdb.Set(ctx, realKeys.Fence("plain"), 41, 0).Err())
	require.NoError(t, r.rdb.Set(ctx, realKeys.Fence("marked"), marked, 0).Err())
	mark := fmt.Sprintf("%d:%d", now.Add(-1500*time.Millisecond).UnixMilli(), now.Add(3*time.Second).UnixMilli())
	require.NoError(t, r.rdb.Set(ctx, realKeys.Released("marked"), mark, time.Minute).Err())
	sessions := []string{"ahead", "plain", "marked", "new"}

	hs, err := NewReader(r.rdb, realKeys, 0).Inspect(ctx, sessions)
	require.NoError(t, err)
	require.Equal(t, []int64{ahead, 41, marked, 0}, []int64{hs[0].Token, hs[1].Token, hs[2].Token, hs[3].Token}, "Inspect reads the old counters")
	require.Equal(t, now.Add(3*time.Second).UnixMilli(), hs[2].HandoffDue.UnixMilli(), "and the old mark")

	a, b := r.manager(t, "a"), r.manager(t, "b")
	res := a.Acquire(ctx, sessions)
	tokens := map[string]int64{}
	for _, x := range res {
		require.NoError(t, x.Err)
		require.Nil(t, x.Bad)
		require.NotNil(t, x.Lease, x.Session)
		tokens[x.Session] = x.Lease.Token()
		if x.Session == "new" {
			require.Zero(t, r.fence(t, x.Session), "no record until the first release")
		} else {
			require.Equal(t, x.Lease.Token(), r.fence(t, x.Session), "the record, upgraded, holds the token")
		}
		require.Zero(t, r.rdb.Exists(ctx, realKeys.Fence(x.Session), realKeys.Released(x.Session)).Val(), "the old keys are gone")
	}
	require.Greater(t, tokens["ahead"], ahead, "above an old counter ahead of the clock")
	require.GreaterOrEqual(t, tokens["plain"], now.UnixMicro(), "above a plain counter: from the clock")
	require.Greater(t, tokens["marked"], marked)
	gap, ok := res[2].Lease.HandoffGap()
	require.True(t, ok, "the old mark's gap")
	require.InDelta(t, 1500, gap.Milliseconds(), 1000)
	next, ok := res[2].Lease.NextPoll()
	require.True(t, ok, "the old mark's schedule")
	require.InDelta(t, 3000, next.Sub(res[2].Lease.Acquired()).Milliseconds(), 1000)

	// The next handoff, on the records alone.
	hand := make([]Handoff, len(res))
	for i, x := range res {
		hand[i] = Handoff{Lease: x.Lease, NextPoll: x.Lease.Acquired().Add(2 * time.Second)}
	}
	require.NoError(t, a.HandOff(ctx, hand...))
	for _, x := range b.Acquire(ctx, sessions) {
		require.NotNil(t, x.Lease, x.Session)
		require.Greater(t, x.Lease.Token(), tokens[x.Session], "tokens keep increasing")
		_, ok := x.Lease.NextPoll()
		require.True(t, ok, "%s keeps its schedule", x.Session)
	}
	require.Zero(t, r.rdb.Exists(ctx, realKeys.Fence("new"), realKeys.Released("new")).Val(), "nothing of the old layout is written")
}

// TestRealRecordsOnlyMarker: a loss marker written where there was none
// (a new keyspace, MarkFresh, or one that lost everything) says that the
// slot holds no key of the layout before the records (":2"): acquisitions
// of sessions without a token no longer look for them, and the ":2"
// survives a marker rewritten after a restart; a marker of the old layout
// (an upgrade in place) keeps the acquisitions looking.
func TestRealRecordsOnlyMarker(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	runID := infoField(r.rdb.Info(ctx, "server").Val(), "run_id")
	tests := []struct {
		name       string
		marker     string // "" for none
		wantMarker string // its form after the acquisition: %s is this server's run id
		wantOld    bool   // the old counter was read (and deleted)
	}{
		{"no marker (new keyspace or lost)", "", "%s:\\d+:2", false},
		{"records only", runID + ":0:2", "%s:0:2", false},
		{"records only, written by another server (a restart)", "0123456789abcdef:0:2", "%s:\\d+:2", false},
		{"the old layout's marker", runID + ":0", "%s:0", true},
		{"the old layout's, another server's", "0123456789abcdef:0", "%s:\\d+", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fmt.Sprintf("s%d", i)
			require.NoError(t, r.rdb.Del(ctx, realKeys.Epoch(0)).Err())
			if tt.marker != "" {
				require.NoError(t, r.rdb.Set(ctx, realKeys.Epoch(0), tt.marker, 0).Err())
			}
			require.NoError(t, r.rdb.Set(ctx, realKeys.Fence(s), 41, 0).Err())
			m := r.manager(t, "a", withQuarantine(-1))
			l := acquireOne(t, m, s).Lease
			require.NotNil(t, l)
			require.Regexp(t, "^"+fmt.Sprintf(tt.wantMarker, runID)+"$", r.rdb.Get(ctx, realKeys.Epoch(0)).Val())
			left := r.rdb.Exists(ctx, realKeys.Fence(s)).Val() == 1
			require.Equal(t, !tt.wantOld, left, "old counter left alone (not looked at)")
			if tt.wantOld {
				require.Equal(t, l.Token(), r.fence(t, s), "the record, upgraded, holds the token")
			} else {
				require.Zero(t, r.fence(t, s), "no record until the first release")
			}
		})
	}
}
