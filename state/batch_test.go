package state_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/faultproxy"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/scripts/lua"
	"github.com/pollworker/pollworker/state"
)

// pipelineCounter counts the pipelines (and single commands) that carry
// a call of one script.
type pipelineCounter struct {
	sha string
	n   atomic.Int64
}

func (h *pipelineCounter) has(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && a[1] == h.sha {
			return true
		}
	}
	return false
}

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.has([]redis.Cmder{cmd}) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.has(cmds) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestLoadBatchedCoalesces: 300 concurrent loads go out in a few
// pipelines, each caller getting its own session's record.
func TestLoadBatchedCoalesces(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	m := managerOn(t, rdb, "w", 10*time.Second)
	plain := state.NewStore(rdb, keys)
	const n = 300
	for i := range n {
		if i%2 == 0 {
			id := fmt.Sprintf("b%d", i)
			_, err := plain.Save(ctx, acquire(t, m, id), time.Time{}, []byte(id))
			require.NoError(t, err)
		}
	}
	hook := &pipelineCounter{sha: redis.NewScript(lua.StateLoad).Hash()}
	rdb.AddHook(hook)
	st := state.NewStore(rdb, keys)

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	recs := make([]state.Record, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			recs[i], errs[i] = st.LoadBatched(ctx, fmt.Sprintf("b%d", i))
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		if i%2 == 0 {
			require.Equal(t, fmt.Sprintf("b%d", i), string(recs[i].Data))
		} else {
			require.Nil(t, recs[i].Data)
		}
	}
	require.LessOrEqual(t, hook.n.Load(), int64(n/10), "%d concurrent loads took %d pipelines", n, hook.n.Load())
	t.Logf("%d concurrent loads in %d pipelines", n, hook.n.Load())
}

// TestLoadBatchedWaitEndsWithItsContext: a caller whose context ends
// while Redis does not answer gets its context's error at once, and its
// batch ends by that deadline (not the store's load timeout): the next
// batch is not held up behind it.
func TestLoadBatchedWaitEndsWithItsContext(t *testing.T) {
	srv := redistest.Start(t)
	proxy, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	const loadTimeout = 2 * time.Second
	st := state.NewStore(rdb, keys, state.WithLoadTimeout(loadTimeout))
	_, err = st.LoadBatched(context.Background(), "warm") // connection made
	require.NoError(t, err)
	proxy.Partition()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = st.LoadBatched(ctx, "s")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(began), 150*time.Millisecond)
	// A call without a deadline: its own batch starts once the first one
	// has ended (50ms) and fails by the load timeout (2s), not 2s + 2s.
	began = time.Now()
	_, err = st.LoadBatched(context.Background(), "t")
	require.Error(t, err, "never read as success")
	require.Less(t, time.Since(began), loadTimeout+time.Second)
	proxy.Heal()
	_, err = st.LoadBatched(context.Background(), "u")
	require.NoError(t, err)
}
