package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // the crash scenario fails dials on purpose
	os.Exit(m.Run())
}

// TestSmoke runs every scenario on tiny sizes against a real redis-server
// and checks that a complete report comes out. It asserts no figure.
func TestSmoke(t *testing.T) {
	redistest.Require(t)
	if testing.Short() {
		t.Skip("starts a redis-server and runs every scenario")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := runBench(ctx, tinySizes(), nil, &progress)
	require.NoError(t, err, progress.String())
	require.Empty(t, rep.Failures, progress.String())
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Scenario] = true
		require.NotEmpty(t, r.Figure)
	}
	for _, s := range scenarios {
		if optIn[s.name] {
			require.False(t, seen[s.name], "opt-in scenario %s ran by default", s.name)
			continue
		}
		require.True(t, seen[s.name], "no rows for scenario %s", s.name)
	}

	var text, md, js bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md)
	require.NoError(t, rep.WriteJSON(&js))
	require.Contains(t, text.String(), "graceful handoff: successor's first poll late against the schedule")
	require.Contains(t, text.String(), "sessions moved per session added")
	require.True(t, strings.HasPrefix(md.String(), "Run: "))
	require.Contains(t, js.String(), `"rows"`)
}

// TestFlags checks the command line: an unknown flag is refused, and
// -only with -json and -md writes both files.
func TestFlags(t *testing.T) {
	require.Error(t, run(context.Background(), []string{"-nope"}, &bytes.Buffer{}))
	redistest.Require(t)
	dir := t.TempDir()
	js, md := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.md")
	// hrw needs no workers: -only hrw -quick keeps this fast.
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-quick", "-only", "hrw", "-json", js, "-md", md}, &out))
	for _, p := range []string{js, md} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NotEmpty(t, b)
	}
	require.Contains(t, out.String(), "HRW bulk assign")
}
