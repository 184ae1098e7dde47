package nodes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestCheckChannel: a Redis user that may not publish or subscribe to the
// events channel is refused with Redis's NOPERM (a worker of such a user
// heard no session change, silently, and polled a paused session until its
// next full round); one that may, is not; the probe it publishes is an
// event receivers can decode, and ignore.
func TestCheckChannel(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := keyspace.Space{}
	const cmds = "+@connection +publish +subscribe +unsubscribe"
	users := []struct {
		name      string
		channels  string
		subscribe bool
		wantErr   string
	}{
		{name: "both", channels: "&poll:events", subscribe: true},
		{name: "publish only, none", channels: "resetchannels", subscribe: false, wantErr: "NOPERM"},
		{name: "subscribe, none", channels: "resetchannels", subscribe: true, wantErr: "NOPERM"},
		{name: "another channel", channels: "&other", subscribe: true, wantErr: "NOPERM"},
	}
	for i, u := range users {
		t.Run(u.name, func(t *testing.T) {
			name := "u" + string(rune('a'+i))
			args := []any{"ACL", "SETUSER", name, "on", ">pw", "resetchannels"}
			if u.channels != "resetchannels" {
				args = append(args, u.channels)
			}
			args = append(args, "-@all")
			for _, c := range strings.Fields(cmds) {
				args = append(args, c)
			}
			require.NoError(t, admin.Do(ctx, args...).Err())
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: name, Password: "pw"})
			t.Cleanup(func() { _ = c.Close() })
			err := CheckChannel(ctx, c, keys, u.subscribe)
			if u.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, u.wantErr)
			require.True(t, redis.HasErrorPrefix(err, "NOPERM"), "Redis's error is wrapped: %v", err)
		})
	}
	got, err := DecodeEvent(Event{Type: EventProbe}.Encode())
	require.NoError(t, err)
	require.Equal(t, EventProbe, got.Type)
}
