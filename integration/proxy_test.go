package integration

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/faultproxy"
)

// startProxy puts a fault-injecting proxy in front of upstream, closed by
// t.Cleanup.
func startProxy(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(upstream)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}
