package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts the round trips a client
// makes: pipelines and single commands, leaving out the commands of
// go-redis's connection setup. Add it with client.AddHook.
type RoundTrips struct {
	// Pipelines and Commands count the pipelines and the single commands.
	Pipelines, Commands atomic.Int64
}

var _ redis.Hook = (*RoundTrips)(nil)

// DialHook implements redis.Hook; it counts nothing.
func (c *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: it counts single commands.
func (c *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !connectionSetup(cmd) {
			c.Commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: it counts pipelines.
func (c *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !connectionSetup(cmds[0]) {
			c.Pipelines.Add(1)
		}
		return next(ctx, cmds)
	}
}

// connectionSetup reports whether cmd is part of go-redis's connection
// setup.
func connectionSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select", "ping":
		return true
	}
	return false
}
