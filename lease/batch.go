package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// call is one script call over a batch of sessions.
type call struct {
	idx  []int     // indexes into the caller's slice
	sent time.Time // when the request was handed to the pipeline
	cmd  *redis.Cmd
	err  error
}

// ints returns the reply as n integers.
func (c *call) ints(n int) ([]int64, error) {
	if c.err != nil {
		return nil, c.err
	}
	vals, err := c.cmd.Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(vals) != n {
		return nil, fmt.Errorf("script reply has %d values, want %d", len(vals), n)
	}
	return vals, nil
}

// batches groups the indexes of items into script calls of at most
// BatchSize sessions; under Redis Cluster each call holds one hash slot.
func (m *Manager) batches(idx []int, sessions []string) [][]int {
	return batchBySlot(idx, sessions, m.cfg.BatchSize, m.cluster, m.cfg.Keys)
}

func batchBySlot(idx []int, sessions []string, size int, cluster bool, keys keyspace.Space) [][]int {
	var out [][]int
	if !cluster {
		for len(idx) > 0 {
			n := min(size, len(idx))
			out = append(out, idx[:n:n])
			idx = idx[n:]
		}
		return out
	}
	bySlot := make(map[uint16][]int)
	var order []uint16
	for _, i := range idx {
		s := keyspace.Slot(keys.Lease(sessions[i]))
		if _, ok := bySlot[s]; !ok {
			order = append(order, s)
		}
		bySlot[s] = append(bySlot[s], i)
	}
	for _, s := range order {
		out = append(out, batchBySlot(bySlot[s], nil, size, false, keys)...)
	}
	return out
}

// run sends one script call per batch in a single pipeline, with EVALSHA,
// and resends the batches that met NOSCRIPT after loading the script. Each
// call records the time its request was sent.
func (m *Manager) run(ctx context.Context, script *redis.Script, idx []int, sessions []string,
	build func(idx []int) ([]string, []any)) []*call {
	var calls []*call
	for _, b := range m.batches(idx, sessions) {
		calls = append(calls, &call{idx: b})
	}
	todo := calls
	for attempt := 0; attempt < 2 && len(todo) > 0; attempt++ {
		pipe := m.cfg.Client.Pipeline()
		for _, c := range todo {
			keys, args := build(c.idx)
			c.cmd = script.EvalSha(ctx, pipe, keys, args...)
		}
		sent := m.cfg.Clock.Now()
		_, _ = pipe.Exec(ctx)
		var again []*call
		for _, c := range todo {
			c.sent = sent
			c.err = c.cmd.Err()
			if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
				again = append(again, c)
			}
		}
		if len(again) > 0 {
			if err := script.Load(ctx, m.cfg.Client).Err(); err != nil {
				for _, c := range again {
					c.err = fmt.Errorf("load script: %w", err)
				}
				break
			}
		}
		todo = again
	}
	return calls
}

// Inspect reads the owner value and TTL of the leases of sessions with a
// read-only script, batched and pipelined like the manager's calls (one
// round trip per shard). It is for readers that hold no leases (status).
func Inspect(ctx context.Context, client Client, keys keyspace.Space, sessions []string, batchSize int) ([]Holding, error) {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	_, cluster := client.(*redis.ClusterClient)
	m := &Manager{
		cfg:     Config{Client: client, Keys: keys, BatchSize: batchSize, Clock: clock.RealClock{}},
		inspect: redis.NewScript(lua.Inspect),
		cluster: cluster,
	}
	return m.Inspect(ctx, sessions)
}

// inspectAll runs the inspect script over sessions in one pipeline.
func (m *Manager) inspectAll(ctx context.Context, sessions []string) ([]Holding, error) {
	idx := make([]int, len(sessions))
	for i := range idx {
		idx[i] = i
	}
	calls := m.run(ctx, m.inspect, idx, sessions, func(idx []int) ([]string, []any) {
		ks := make([]string, len(idx))
		for j, i := range idx {
			ks[j] = m.cfg.Keys.Lease(sessions[i])
		}
		return ks, nil
	})
	out := make([]Holding, len(sessions))
	for _, c := range calls {
		if c.err != nil {
			return nil, fmt.Errorf("inspect: %w", c.err)
		}
		vals, err := c.cmd.Slice()
		if err != nil || len(vals) != 2*len(c.idx) {
			return nil, fmt.Errorf("inspect: reply of %d values for %d leases: %v", len(vals), len(c.idx), err)
		}
		for j, i := range c.idx {
			out[i].Session = sessions[i]
			if v, ok := vals[2*j].(string); ok {
				out[i].Owner = v
			}
			if ms, ok := vals[2*j+1].(int64); ok && ms > 0 {
				out[i].Remaining = time.Duration(ms) * time.Millisecond
			} else if ok && ms == -1 {
				out[i].Remaining = -1
			}
		}
	}
	return out, nil
}
