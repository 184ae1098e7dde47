package session

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

func TestCutsSlots(t *testing.T) {
	cron := Session{ID: "c", URL: "https://example.com/", Schedule: "* * * * *"}
	enc := func(s Session) []byte {
		b, err := Encode(s)
		require.NoError(t, err)
		return b
	}
	with := func(f func(*Session)) Session { s := cron; f(&s); return s }
	tests := []struct {
		name    string
		old     []byte
		present bool
		next    Session
		want    bool
	}{
		{"new", nil, false, cron, true},
		{"unchanged", enc(cron), true, cron, false},
		{"another URL", enc(cron), true, with(func(s *Session) { s.URL = "https://example.com/b" }), false},
		{"another schedule", enc(cron), true, with(func(s *Session) { s.Schedule = "*/2 * * * *" }), true},
		{"another zone", enc(cron), true, with(func(s *Session) { s.TZ = "Europe/Berlin" }), true},
		{"another catch-up", enc(cron), true, with(func(s *Session) { s.CatchUp = "all" }), true},
		{"another window", enc(cron), true, with(func(s *Session) { s.CatchUpWindow = Duration(time.Minute) }), true},
		{"another jitter", enc(cron), true, with(func(s *Session) { s.Jitter = Duration(time.Second) }), true},
		{"resumed", enc(with(func(s *Session) { s.Paused = true })), true, cron, true},
		{"written paused", enc(cron), true, with(func(s *Session) { s.Paused = true }), false},
		{"was an interval session", enc(sess("c")), true, cron, true},
		{"was malformed", []byte("{"), true, cron, true},
		{"an interval session", nil, false, sess("c"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, cutsSlots(tt.old, tt.present, tt.next))
		})
	}
}

// TestSlotCutWrites: removing, pausing or resuming a scheduled session, or
// changing its schedule, marks its recorded slots as not carried over
// (slot_cut, Redis TIME) before the change is recorded; a session whose
// state recorded no slot gets no state key.
func TestSlotCutWrites(t *testing.T) {
	ctx := ctxT(t)
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	cron := Session{ID: "c", URL: "https://example.com/", Schedule: "* * * * *"}
	cutOf := func(id string) string {
		v, err := c.HGet(ctx, keys.State(id), "slot_cut").Result()
		if err == redis.Nil {
			return ""
		}
		require.NoError(t, err)
		return v
	}
	recorded := func(id string) {
		require.NoError(t, c.HSet(ctx, keys.State(id), "slot_finished", "1", "slot_cut", "0").Err())
	}
	cutSince := func(id string, before time.Time) {
		t.Helper()
		v := cutOf(id)
		require.NotEqual(t, "0", v, "cut")
		n, err := c.HGet(ctx, keys.State(id), "slot_cut").Int64()
		require.NoError(t, err)
		require.False(t, time.UnixMilli(n).Before(before.Add(-time.Second)), "the cut is Redis' time of the write")
	}

	recorded("c")
	start := time.Now()
	require.NoError(t, s.Put(ctx, cron))
	cutSince("c", start)

	recorded("c")
	other := cron
	other.URL = "https://example.com/b"
	require.NoError(t, s.Put(ctx, other))
	require.Equal(t, "0", cutOf("c"), "the schedule did not change")

	other.Schedule = "*/2 * * * *"
	require.NoError(t, s.PutMany(ctx, []Session{other}))
	cutSince("c", start)

	recorded("c")
	require.NoError(t, s.Pause(ctx, "c"))
	cutSince("c", start)
	recorded("c")
	require.NoError(t, s.Resume(ctx, "c"))
	cutSince("c", start)

	recorded("c")
	require.NoError(t, s.Delete(ctx, "c"))
	cutSince("c", start)
	recorded("d")
	require.NoError(t, s.Put(ctx, Session{ID: "d", URL: "https://example.com/", Schedule: "* * * * *"}))
	recorded("d")
	_, err := s.DeleteMany(ctx, []string{"d"})
	require.NoError(t, err)
	cutSince("d", start)

	require.NoError(t, s.Put(ctx, sess("iv")))
	require.NoError(t, s.Pause(ctx, "iv"))
	require.NoError(t, s.Delete(ctx, "iv"))
	n, err := c.Exists(ctx, keys.State("iv")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no state key made for a session without recorded slots")
}
