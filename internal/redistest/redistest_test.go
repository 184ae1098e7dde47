package redistest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Restart()
	// No persistence: the key is gone after a restart.
	require.Equal(t, int64(0), c.Exists(ctx, "k").Val())
	s.Stop()
	require.Error(t, c.Ping(ctx).Err())
}
