package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestCounterCountsScriptsByScript: script calls are counted by script
// (EVALSHA by its SHA1, EVAL by the SHA1 of its source, go-redis's NOSCRIPT
// fallback included), with their keys, alone or in a pipeline; other
// commands are not.
func TestCounterCountsScriptsByScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	var n Counter
	c.AddHook(&n)
	ctx := context.Background()
	src := "return #KEYS"
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	script := redis.NewScript(src)

	require.NoError(t, script.Run(ctx, c, []string{"a", "b"}).Err()) // NOSCRIPT, then EVAL
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		script.EvalSha(ctx, p, []string{"a", "b", "c"})
		p.Get(ctx, "x")
		return nil
	})
	require.ErrorIs(t, err, redis.Nil)
	require.NoError(t, c.Set(ctx, "x", "1", 0).Err())

	got := n.Scripts()
	require.Equal(t, map[string]ScriptCalls{sha: {Calls: 3, Keys: 7}}, got)
}
