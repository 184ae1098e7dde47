package election

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestNewValidates(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	tests := []struct {
		name    string
		give    Config
		wantErr string
	}{
		{name: "no client", give: Config{Role: "r", ID: "a"}, wantErr: "Client is required"},
		{name: "no role", give: Config{Client: c, ID: "a"}, wantErr: "Role is required"},
		{name: "bad role", give: Config{Client: c, Role: "a b", ID: "a"}, wantErr: "Role"},
		{name: "bad id", give: Config{Client: c, Role: "r", ID: "a#b"}, wantErr: "ID"},
		{name: "short ttl", give: Config{Client: c, Role: "r", ID: "a", TTL: time.Millisecond}, wantErr: "TTL must be at least 10ms"},
		{name: "renew too long", give: Config{Client: c, Role: "r", ID: "a", TTL: time.Second, RenewInterval: 600 * time.Millisecond}, wantErr: "RenewInterval must be in (0, TTL/2]"},
		{name: "retry too long", give: Config{Client: c, Role: "r", ID: "a", TTL: time.Second, RetryInterval: 2 * time.Second}, wantErr: "RetryInterval must be in (0, TTL]"},
		{name: "negative release", give: Config{Client: c, Role: "r", ID: "a", ReleaseTimeout: -1}, wantErr: "ReleaseTimeout"},
		{name: "defaults", give: Config{Client: c, Role: "r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.give)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrConfig)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, DefaultTTL, e.cfg.TTL)
			require.Equal(t, DefaultTTL/3, e.cfg.RenewInterval)
			require.Equal(t, DefaultTTL/6, e.cfg.RetryInterval)
			require.NotEmpty(t, e.ID())
		})
	}
}
