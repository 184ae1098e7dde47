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

// TestPortTakenByAnotherServer: a server whose port another redis-server
// already holds does not start "ready" on the other's process (whose
// data and lifetime belong to another test); Start picks another port.
func TestPortTakenByAnotherServer(t *testing.T) {
	first := Start(t)
	second := &Server{t: t, Port: first.Port, Dir: t.TempDir()}
	err := second.launch()
	require.ErrorIs(t, err, errPortTaken)
	require.False(t, second.Running())

	third := Start(t)
	require.NotEqual(t, first.Pid(), third.Pid())
	require.NoError(t, third.Client(t).Ping(context.Background()).Err())
}
