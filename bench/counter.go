package bench

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook that counts the commands a client sends and
// its round trips (a pipeline is one round trip of many commands).
type Counter struct {
	commands   atomic.Int64
	roundTrips atomic.Int64
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
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts every command of the pipeline and one round trip.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.commands.Add(int64(len(cmds)))
		c.roundTrips.Add(1)
		return next(ctx, cmds)
	}
}
