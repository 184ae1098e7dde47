package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/state"
)

// TestRealCorruptStateReadsAsNeverSaved: a state key of the wrong type or
// a hash with garbage fields reads as never saved with Corrupt saying why,
// fails neither its batch nor its session, is left in Redis by the read,
// and is overwritten by the next fenced save.
func TestRealCorruptStateReadsAsNeverSaved(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys)
	m := managerOn(t, rdb, "w1", 10*time.Second)
	_, err := st.Save(ctx, acquire(t, m, "good"), time.Time{}, []byte("cursor"))
	require.NoError(t, err)

	tests := []struct {
		name    string
		id      string
		plant   func(key string) error
		corrupt string
	}{
		{"a string", "str", func(k string) error { return rdb.Set(ctx, k, "garbage", 0).Err() }, "the key is not a hash: wrong type string"},
		{"a list", "list", func(k string) error { return rdb.RPush(ctx, k, "x").Err() }, "the key is not a hash: wrong type list"},
		{"a garbage token", "tok", func(k string) error {
			return rdb.HSet(ctx, k, "data", "x", "token", "garbage", "saved", "1", "polled", "1").Err()
		}, `field token: "garbage" is not a decimal from 0 to 2^63-1`},
		{"a token above every fencing token", "huge", func(k string) error {
			return rdb.HSet(ctx, k, "data", "x", "token", "9007199254740993", "saved", "1", "polled", "1").Err()
		}, "field token: 9007199254740993 is at or above 2^53-1, above every fencing token"},
		{"no data", "nodata", func(k string) error { return rdb.HSet(ctx, k, "token", "5", "saved", "1", "polled", "1").Err() }, "field data is missing"},
		{"a garbage time", "saved", func(k string) error {
			return rdb.HSet(ctx, k, "data", "x", "token", "5", "saved", "yesterday", "polled", "1").Err()
		}, `field saved: "yesterday" is not a decimal from 0 to 2^63-1`},
	}
	ids := []string{"good"}
	for _, tt := range tests {
		require.NoError(t, tt.plant(keys.State(tt.id)))
		ids = append(ids, tt.id)
	}
	recs, err := st.LoadMany(ctx, ids)
	require.NoError(t, err, "a corrupt state must not fail its batch")
	require.Equal(t, "cursor", string(recs["good"].Data))
	require.Empty(t, recs["good"].Corrupt)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := recs[tt.id]
			require.Equal(t, tt.corrupt, rec.Corrupt)
			require.Zero(t, rec.Token, "reads as never saved")
			require.Nil(t, rec.Data)
			require.False(t, rec.Read.IsZero())
			one, err := st.Load(ctx, tt.id)
			require.NoError(t, err)
			require.Equal(t, tt.corrupt, one.Corrupt)
			n, err := rdb.Exists(ctx, keys.State(tt.id)).Result()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a read never deletes a corrupt state")

			_, err = st.Save(ctx, acquire(t, m, tt.id), time.Time{}, []byte("fresh"))
			require.NoError(t, err, "the next fenced save overwrites a corrupt state")
			after, err := st.Load(ctx, tt.id)
			require.NoError(t, err)
			require.Empty(t, after.Corrupt)
			require.Equal(t, "fresh", string(after.Data))
			require.NotZero(t, after.Token)
		})
	}
}

// TestRealCorruptStateDoesNotFailBatched: LoadBatched, which the workers
// use, gives every caller its own record when one state of the batch is of
// the wrong type.
func TestRealCorruptStateDoesNotFailBatched(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys)
	require.NoError(t, rdb.Set(ctx, keys.State("bad"), "garbage", 0).Err())
	require.NoError(t, rdb.HSet(ctx, keys.State("tok"), "data", "x", "token", "garbage").Err())
	for _, id := range []string{"bad", "tok", "fine"} {
		rec, err := st.LoadBatched(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, id != "fine", rec.Corrupt != "", id)
	}
}
