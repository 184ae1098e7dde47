package poller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/scripts/lua"
)

// TestJoinReadInAFailedRoundIsPlanned: a round that reads a join, then
// fails to read the session changes (a request timing out on a loaded
// machine), must plan the join in the next round. Before, the next round
// saw no membership change (the first had recorded it) and kept the old
// plan until the next change: the joiner was never handed its share
// (TestGracefulHandoffKeepsTheSchedule, "b takes its share", failed for
// a minute; TestNewWorkerIsReadyOnceItHoldsItsShare turned ready by its
// bound holding nothing).
func TestJoinReadInAFailedRoundIsPlanned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Start(t).Client(t)
	ids := addSessions(t, client, 20, time.Second)
	c := newStepped(t, client, "w", PollFunc(func(context.Context, *Turn) error { return nil }))
	owners := func() map[string]int {
		w := c.world(true)
		n := map[string]int{}
		for _, id := range ids {
			n[w.owner(id)]++
		}
		return n
	}
	c.claims.startRound()
	require.True(t, c.view.refresh(ctx, true))
	require.Equal(t, map[string]int{"w": len(ids)}, owners())

	joinGhost(t, client, "b")
	fail := &failScript{sha: redis.NewScript(lua.SessionChanges).Hash()}
	fail.left.Store(1)
	client.AddHook(fail)
	require.False(t, c.view.refresh(ctx, false), "the round that reads the join fails to read the changes")
	require.True(t, c.view.refresh(ctx, false))
	require.Positive(t, owners()["b"], "the join is planned in the next round")
}

// failScript fails the first left calls of the script whose SHA is sha,
// alone or with the whole pipeline they are in, as a Redis timeout would.
type failScript struct {
	sha  string
	left atomic.Int64
}

func (h *failScript) fail(cmds ...redis.Cmder) error {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && a[1] == h.sha && h.left.Add(-1) >= 0 {
			err := errors.New("injected: i/o timeout")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
	}
	return nil
}

func (h *failScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.fail(cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.fail(cmds...); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}
