package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// call is one script call over a batch of sessions.
type call struct {
	idx    []int     // indexes into the caller's slice
	leases []*Lease  // or the leases it renews
	args   []any     // the whole command: evalsha, sha, numkeys, keys..., argv...
	sent   time.Time // when the request was handed to the pipeline
	cmd    *redis.Cmd
	err    error
}

// evalsha returns the start of an EVALSHA command line of script with
// numKeys keys, with room for extra more arguments (keys included).
func evalsha(script *redis.Script, numKeys, extra int) []any {
	args := make([]any, 3, 3+extra)
	args[0], args[1], args[2] = "evalsha", script.Hash(), numKeys
	return args
}

// transport sends batched script calls over pipelines: the part of the
// manager that both the writer (Manager) and the read-only Reader use. It
// holds configuration only; it is safe for concurrent use.
type transport struct {
	client       Client
	keys         keyspace.Space
	batchSize    int
	cluster      bool
	maxPipelines int
	clock        clock.PassiveClock
	waitReplicas int           // > 0: WAIT after the scripts that ask for it
	waitTimeout  time.Duration // of each WAIT
}

func newTransport(client Client, keys keyspace.Space, batchSize int, clk clock.PassiveClock) transport {
	_, cluster := client.(*redis.ClusterClient)
	return transport{client: client, keys: keys, batchSize: batchSize, cluster: cluster, maxPipelines: maxPipelines, clock: clk}
}

// batches groups the indexes of items into script calls of at most
// batchSize sessions; under Redis Cluster each call holds one hash slot.
func (m *transport) batches(idx []int, sessions []string) [][]int {
	return batchBySlot(idx, sessions, m.batchSize, m.cluster, m.keys)
}

func batchBySlot(idx []int, sessions []string, size int, cluster bool, keys keyspace.Space) [][]int {
	return chunkBySlot(idx, size, cluster, func(i int) uint16 { return keyspace.Slot(keys.Lease(sessions[i])) })
}

// chunkBySlot splits items into chunks of at most size; with cluster set,
// every chunk holds items of one hash slot (slotOf), slots in the order of
// their first item.
func chunkBySlot[T any](items []T, size int, cluster bool, slotOf func(T) uint16) [][]T {
	chunk := func(out [][]T, items []T) [][]T {
		for len(items) > 0 {
			n := min(size, len(items))
			out = append(out, items[:n:n])
			items = items[n:]
		}
		return out
	}
	if !cluster {
		return chunk(make([][]T, 0, (len(items)+size-1)/size), items)
	}
	bySlot := make(map[uint16][]T)
	var order []uint16
	for _, it := range items {
		s := slotOf(it)
		if _, ok := bySlot[s]; !ok {
			order = append(order, s)
		}
		bySlot[s] = append(bySlot[s], it)
	}
	var out [][]T
	for _, s := range order {
		out = chunk(out, bySlot[s])
	}
	return out
}

// Pipelines of one cycle. A cycle of many calls is split into up to
// maxPipelines pipelines sent at once on separate pooled connections; each
// pipeline's replies are handled as soon as it returns, while Redis still
// runs the others, so the client's work overlaps Redis's. The pipelines go
// out together: the cycle still costs one round trip per shard in wall
// time. A pipeline carries at least minCallsPerPipeline calls.
const (
	maxPipelines        = 4
	minCallsPerPipeline = 4
)

// pipelines is how many pipelines n calls are split into.
func (m *transport) pipelines(n int) int {
	p := min(m.maxPipelines, n/minCallsPerPipeline)
	return max(p, 1)
}

// send runs calls with EVALSHA in parts pipelines sent concurrently (under
// Redis Cluster, at least one per master: partsOf), and sends the calls
// that met NOSCRIPT again once the script is loaded: with one server, all
// of them in one more pipeline after the others returned; under Cluster,
// each pipeline's own, loaded on its master, without waiting for the other
// masters. Each call records the time its request was sent. done is
// called, from the goroutine that ran them, with each group of finished
// calls (never a call twice) and the time the replies had all arrived;
// calls of different groups may be handled concurrently. send returns after
// every done has returned. With wait (and waitReplicas set), every
// pipeline ends with a WAIT (exec).
func (m *transport) send(ctx context.Context, script *redis.Script, calls []*call, parts int, wait bool,
	done func(calls []*call, now time.Time)) {
	wait = wait && m.waitReplicas > 0
	_, cluster := m.client.(*redis.ClusterClient)
	all := m.partsOf(ctx, calls, parts)
	missing := make([][]*call, len(all)) // NOSCRIPT, per part, with one server
	var wg sync.WaitGroup
	for p, part := range all {
		run := func() {
			ok, miss := m.exec(ctx, part, wait)
			done(ok, m.clock.Now())
			if cluster {
				m.resend(ctx, script, miss, wait, done)
			} else {
				missing[p] = miss
			}
		}
		if p == len(all)-1 {
			run() // the last part in this goroutine
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
	var again []*call
	for _, cs := range missing {
		again = append(again, cs...)
	}
	m.resend(ctx, script, again, wait, done)
}

// resend loads script for calls, which met NOSCRIPT, sends them again in
// one pipeline and hands them all to done (failed: the load, or NOSCRIPT
// again).
func (m *transport) resend(ctx context.Context, script *redis.Script, calls []*call, wait bool, done func(calls []*call, now time.Time)) {
	if len(calls) == 0 {
		return
	}
	again, failed := m.loadScript(ctx, script, calls)
	if len(failed) > 0 {
		done(failed, m.clock.Now())
	}
	if len(again) > 0 {
		ok, still := m.exec(ctx, again, wait)
		done(append(ok, still...), m.clock.Now())
	}
}

// partsOf splits calls into the pipelines of one send: n parts of about
// equal size; under Redis Cluster, n parts (at least one) of the calls of
// each master, by the client's slot map (a call whose master it cannot
// name goes with the others of none). go-redis fails every command of a
// Cluster pipeline whose retry a deadline cut short, replies already
// received included (setCmdsErr): in one pipeline, a master that did not
// answer failed the renewals on every other master too.
func (m *transport) partsOf(ctx context.Context, calls []*call, n int) [][]*call {
	cc, ok := m.client.(*redis.ClusterClient)
	if !ok || len(calls) == 0 {
		return split(calls, n)
	}
	var masters []string
	byMaster := make(map[string][]*call)
	for _, c := range calls {
		addr := ""
		key, _ := c.args[3].(string) // every script call has keys, all in one slot
		if master, err := cc.MasterForKey(ctx, key); err == nil {
			addr = master.Options().Addr
		}
		if _, seen := byMaster[addr]; !seen {
			masters = append(masters, addr)
		}
		byMaster[addr] = append(byMaster[addr], c)
	}
	var parts [][]*call
	for _, addr := range masters {
		parts = append(parts, split(byMaster[addr], n)...)
	}
	return parts
}

// split splits calls into n parts of about equal size (fewer when there
// are fewer calls, at least one).
func split(calls []*call, n int) [][]*call {
	n = max(1, min(n, len(calls)))
	parts := make([][]*call, n)
	for p := range parts {
		parts[p] = calls[p*len(calls)/n : (p+1)*len(calls)/n]
	}
	return parts
}

// loadScript loads script for the calls that met NOSCRIPT and returns
// those to send again, and those that failed (err set). With one Redis
// server it loads the script there (go-redis: on every master of other
// clients). Under Redis Cluster it loads it on the master of each call's
// slot only: a script unknown to a promoted replica is loaded there even
// while another master does not answer, whose calls alone fail.
func (m *transport) loadScript(ctx context.Context, script *redis.Script, calls []*call) (again, failed []*call) {
	cc, ok := m.client.(*redis.ClusterClient)
	if !ok {
		if err := script.Load(ctx, m.client).Err(); err != nil {
			for _, c := range calls {
				c.err = fmt.Errorf("load script: %w", err)
			}
			return nil, calls
		}
		return calls, nil
	}
	loaded := make(map[string]error) // by master address
	for _, c := range calls {
		key, _ := c.args[3].(string) // every script call has keys, all in one slot
		master, err := cc.MasterForKey(ctx, key)
		if err == nil {
			addr := master.Options().Addr
			var seen bool
			if err, seen = loaded[addr]; !seen {
				err = script.Load(ctx, master).Err()
				loaded[addr] = err
			}
		}
		if err != nil {
			c.err = fmt.Errorf("load script: %w", err)
			failed = append(failed, c)
			continue
		}
		again = append(again, c)
	}
	return again, failed
}

// exec sends calls in one pipeline and returns them split into those that
// finished (replied, or failed) and those that met NOSCRIPT. With wait, the
// pipeline ends with WAIT WaitReplicas WaitTimeout, and every call fails
// with ErrNotReplicated unless enough replicas acknowledged its writes.
func (m *transport) exec(ctx context.Context, calls []*call, wait bool) (finished, noscript []*call) {
	pipe := m.client.Pipeline()
	for _, c := range calls {
		c.cmd = redis.NewCmd(ctx, c.args...)
		c.cmd.SetFirstKeyPos(3) // for cluster routing; every script call has keys
		_ = pipe.Process(ctx, c.cmd)
	}
	var acked *redis.IntCmd
	if wait {
		acked = redis.NewIntCmd(ctx, "wait", m.waitReplicas, m.waitTimeout.Milliseconds())
		_ = pipe.Process(ctx, acked)
	}
	sent := m.clock.Now()
	_, _ = pipe.Exec(ctx)
	var replicated error
	if acked != nil {
		if n, err := acked.Result(); err != nil {
			replicated = fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		} else if n < int64(m.waitReplicas) {
			replicated = fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, m.waitReplicas, m.waitTimeout)
		}
	}
	finished = calls[:0:0]
	for _, c := range calls {
		c.sent = sent
		c.err = c.cmd.Err()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			noscript = append(noscript, c)
			continue
		}
		if c.err == nil && replicated != nil {
			c.err = replicated
		}
		finished = append(finished, c)
	}
	return finished, noscript
}

// Inspect reads the owner value and TTL of the leases of sessions with a
// read-only script, batched and pipelined like the manager's calls (one
// round trip per shard): NewReader(...).Inspect. It is for readers that
// hold no leases (status, explain, check).
func Inspect(ctx context.Context, client Client, keys keyspace.Space, sessions []string, batchSize int) ([]Holding, error) {
	return NewReader(client, keys, batchSize).Inspect(ctx, sessions)
}

// Reader reads leases without holding any: who holds them, and which are
// free, with read-only scripts batched and pipelined as the Manager sends
// its own (one round trip per shard). A Manager reads through one too. It
// is safe for concurrent use.
type Reader struct {
	transport
	inspect, unheld *redis.Script
}

// NewReader returns a Reader of the leases in keys; batchSize <= 0 means
// DefaultBatchSize.
func NewReader(client Client, keys keyspace.Space, batchSize int) *Reader {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	return newReader(newTransport(client, keys, batchSize, clock.RealClock{}))
}

func newReader(t transport) *Reader {
	return &Reader{transport: t, inspect: redis.NewScript(lua.Inspect), unheld: redis.NewScript(lua.Unheld)}
}

// readLeases runs a read-only script whose keys are keysOf each of
// sessions (the same number for each), batched and pipelined; each call's
// idx maps its keys back to positions in sessions.
func (m *Reader) readLeases(ctx context.Context, script *redis.Script, sessions []string, keysOf func(string) []string) []*call {
	idx := make([]int, len(sessions))
	for i := range idx {
		idx[i] = i
	}
	var calls []*call
	for _, b := range m.batches(idx, sessions) {
		var args []any
		for _, i := range b {
			ks := keysOf(sessions[i])
			if args == nil {
				args = evalsha(script, len(ks)*len(b), len(ks)*len(b))
			}
			for _, k := range ks {
				args = append(args, k)
			}
		}
		calls = append(calls, &call{idx: b, args: args})
	}
	m.send(ctx, script, calls, 1, false, func([]*call, time.Time) {})
	return calls
}

// Inspect reads who holds the leases of sessions, read-only, their last
// tokens and handoff marks, and which of them have a key the acquire
// script cannot use (Holding.Bad).
func (m *Reader) Inspect(ctx context.Context, sessions []string) ([]Holding, error) {
	calls := m.readLeases(ctx, m.inspect, sessions, func(s string) []string {
		return []string{m.keys.Lease(s), m.keys.Fencing(s)}
	})
	out := make([]Holding, len(sessions))
	for _, c := range calls {
		if c.err != nil {
			return nil, fmt.Errorf("inspect: %w", c.err)
		}
		vals, err := c.cmd.Slice()
		if err != nil || len(vals) != 5*len(c.idx) {
			return nil, fmt.Errorf("inspect: reply of %d values for %d leases: %v", len(vals), len(c.idx), err)
		}
		for j, i := range c.idx {
			s := sessions[i]
			v := vals[5*j : 5*j+5]
			out[i].Session = s
			if owner, ok := v[0].(string); ok {
				out[i].Owner = owner
			}
			if ms, ok := v[1].(int64); ok && ms > 0 {
				out[i].Remaining = time.Duration(ms) * time.Millisecond
			} else if ok && ms == -1 {
				out[i].Remaining = -1
			}
			if problem, ok := v[2].(string); ok {
				role, problem, _ := strings.Cut(problem, ":")
				out[i].Bad = newBadKey(m.keys, s, role, problem)
			}
			out[i].Token, _ = v[3].(int64)
			if ms, ok := v[4].(int64); ok && ms >= 0 {
				out[i].HandoffDue = time.UnixMilli(ms)
			}
		}
	}
	return out, nil
}

// Unheld returns, read-only, those of sessions whose lease nobody holds, in
// their order. It asks Redis only whether each key exists and gets back
// only the free ones: several times cheaper than Inspect for watching many
// sessions of which few are free.
func (m *Reader) Unheld(ctx context.Context, sessions []string) ([]string, error) {
	calls := m.readLeases(ctx, m.unheld, sessions, func(s string) []string { return []string{m.keys.Lease(s)} })
	var free []int
	for _, c := range calls {
		if c.err != nil {
			return nil, fmt.Errorf("unheld: %w", c.err)
		}
		pos, err := c.cmd.Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("unheld: %w", err)
		}
		for _, p := range pos {
			if p < 1 || int(p) > len(c.idx) {
				return nil, fmt.Errorf("unheld: position %d out of a batch of %d", p, len(c.idx))
			}
			free = append(free, c.idx[p-1])
		}
	}
	if len(free) == 0 {
		return nil, nil
	}
	slices.Sort(free)
	out := make([]string, len(free))
	for i, f := range free {
		out[i] = sessions[f]
	}
	return out, nil
}
