package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunShowsHandover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	began := time.Now()
	require.NoError(t, run(ctx, &out, ""))
	t.Logf("example took %v:\n%s", time.Since(began), out.String())
	s := out.String()
	for _, want := range []string{"embedded Redis", "leader: ", "resigns", "handover: ", "transfers leadership", "nightly job ran 1 time(s) among 3 replicas", "stopped"} {
		require.Contains(t, s, want)
	}
	require.Equal(t, 1, strings.Count(s, "runs the nightly job"))
	require.Less(t, time.Since(began), 10*time.Second)
}

func TestRedact(t *testing.T) {
	require.Equal(t, "redis://user:xxxxx@127.0.0.1:6379/0", redact("redis://user:secret@127.0.0.1:6379/0"))
}
