package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook that counts the commands a client sends and
// its round trips (a pipeline is one round trip of many commands), and the
// script calls (EVALSHA, EVAL) by script with their keys: INFO commandstats
// counts every script under evalsha.
type Counter struct {
	commands   atomic.Int64
	roundTrips atomic.Int64

	mu      sync.Mutex
	scripts map[string]ScriptCalls // by the script's SHA1, lower case
}

// ScriptCalls counts the calls of one script and the keys they passed.
type ScriptCalls struct {
	Calls, Keys int64
}

// Scripts returns the script calls counted so far, by the script's SHA1
// (lower-case hex).
func (c *Counter) Scripts() map[string]ScriptCalls {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.scripts)
}

// noteScript counts cmd if it is a script call.
func (c *Counter) noteScript(cmd redis.Cmder) {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return
	}
	args := cmd.Args()
	if len(args) < 3 {
		return
	}
	script := fmt.Sprint(args[1])
	if name == "eval" {
		sum := sha1.Sum([]byte(script))
		script = hex.EncodeToString(sum[:])
	}
	var keys int64
	_, _ = fmt.Sscan(fmt.Sprint(args[2]), &keys)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scripts == nil {
		c.scripts = make(map[string]ScriptCalls)
	}
	sc := c.scripts[strings.ToLower(script)]
	sc.Calls++
	sc.Keys += keys
	c.scripts[strings.ToLower(script)] = sc
}

var _ redis.Hook = (*Counter)(nil)

// Commands is the number of commands sent so far.
func (c *Counter) Commands() int64 { return c.commands.Load() }

// RoundTrips is the number of round trips (single commands or pipelines).
func (c *Counter) RoundTrips() int64 { return c.roundTrips.Load() }

// DialHook passes dials through.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command and one round trip.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.commands.Add(1)
		c.roundTrips.Add(1)
		c.noteScript(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts every command of the pipeline and one round trip.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.commands.Add(int64(len(cmds)))
		c.roundTrips.Add(1)
		for _, cmd := range cmds {
			c.noteScript(cmd)
		}
		return next(ctx, cmds)
	}
}
