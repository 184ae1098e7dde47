package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/state"
)

// TestSlots: the slot fields are fenced like a save, live beside the
// poller's data without touching it, and a hash with slot fields only
// reads as never saved.
func TestSlots(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys)
	m := managerOn(t, rdb, "w1", 10*time.Second)
	l := acquire(t, m, "s1")

	none, err := st.LoadSlots(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, state.Slots{}, none)

	slot := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	require.NoError(t, st.SlotStarted(ctx, l, slot))
	rec, err := st.Load(ctx, "s1")
	require.NoError(t, err)
	require.Zero(t, rec.Token, "slot fields only: never saved")
	require.Empty(t, rec.Corrupt)
	got, err := st.LoadSlots(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, state.Slots{Started: slot, Token: l.Token()}, got)

	_, err = st.Save(ctx, l, time.Time{}, []byte("data"))
	require.NoError(t, err)
	require.NoError(t, st.SlotFinished(ctx, l, slot, "ok"))
	got, err = st.LoadSlots(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, state.Slots{Started: slot, Finished: slot, Outcome: "ok", Token: l.Token()}, got)
	rec, err = st.Load(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, "data", string(rec.Data), "the poller's data is left alone")

	// A lease no longer held writes nothing.
	require.NoError(t, m.Release(ctx, l))
	err = st.SlotStarted(ctx, l, slot.Add(time.Hour))
	require.ErrorIs(t, err, state.ErrStale)
	require.ErrorIs(t, err, state.ErrNotHeld)
	got, err = st.LoadSlots(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, slot, got.Started)

	// Unreadable fields read as none, saying why.
	require.NoError(t, rdb.HSet(ctx, keys.State("s2"), "slot_started", "soon").Err())
	got, err = st.LoadSlots(ctx, "s2")
	require.NoError(t, err)
	require.Contains(t, got.Corrupt, "field slot_started")
	require.True(t, got.Started.IsZero())
	require.NoError(t, rdb.Set(ctx, keys.State("s3"), "x", 0).Err())
	got, err = st.LoadSlots(ctx, "s3")
	require.NoError(t, err)
	require.Equal(t, "the key is not a hash", got.Corrupt)
}
