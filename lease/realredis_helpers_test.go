package lease

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// realKeys is the default key space the real-Redis tests use.
var realKeys = keyspace.Space{}

// realEnv is one throwaway redis-server with a plain client and a client whose
// script traffic is counted.
type realEnv struct {
	srv     *redistest.Server
	rdb     *redis.Client // plain: for direct script calls and checks
	counted *redis.Client // with hook: for the managers under test
	hook    *scriptHook
}

func startReal(t *testing.T) *realEnv {
	t.Helper()
	srv := redistest.Start(t)
	h := &scriptHook{}
	counted := srv.Client(t)
	counted.AddHook(h)
	return &realEnv{srv: srv, rdb: srv.Client(t), counted: counted, hook: h}
}

// manager builds a Manager on the counted client. The clock defaults to a
// fake one; pass useRealClock where real expiry matters.
func (r *realEnv) manager(t *testing.T, holder string, opts ...func(*Config)) *Manager {
	t.Helper()
	cfg := Config{
		Client: r.counted,
		Holder: holder,
		TTL:    10 * time.Second,
		Clock:  clocktesting.NewFakeClock(time.Unix(1000, 0)),
		// A fresh redis-server looks like a data loss; the quarantine has
		// tests of its own (quarantine_test.go).
		LossQuarantine: -1,
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

// useRealClock makes a manager measure deadlines on the real monotonic clock.
func useRealClock(c *Config) { c.Clock = nil }

func withTTL(ttl time.Duration) func(*Config) { return func(c *Config) { c.TTL = ttl } }

// owner returns the value stored in the lease key of session ("" if none).
func (r *realEnv) owner(t *testing.T, session string) string {
	t.Helper()
	v, err := r.rdb.Get(context.Background(), realKeys.Lease(session)).Result()
	if err == redis.Nil {
		return ""
	}
	require.NoError(t, err)
	return v
}

// pttl returns the remaining TTL of the lease key of session in ms (PTTL:
// -2 missing, -1 no expiry).
func (r *realEnv) pttl(t *testing.T, session string) int64 {
	t.Helper()
	ms, err := r.rdb.Do(context.Background(), "PTTL", realKeys.Lease(session)).Int64()
	require.NoError(t, err)
	return ms
}

// markTTL is the lifetime (ms) of the handoff marks runRelease leaves.
const markTTL = 5000

// mark returns the handoff mark of session that still counts (its release
// time, -1 if none) and the ms it still counts for (-2 if none).
func (r *realEnv) mark(t *testing.T, session string) (ms, left int64) {
	t.Helper()
	ctx := context.Background()
	rec, err := r.rdb.HMGet(ctx, realKeys.Fencing(session), keyspace.FieldToken, keyspace.FieldHandoff).Result()
	require.NoError(t, err)
	tok, _ := rec[0].(string)
	m, _ := rec[1].(string)
	parts := strings.Split(m, ":")
	if tok == "" {
		tok = "0" // runRelease's token then
	}
	if len(parts) < 3 || parts[0] != tok {
		return -1, -2
	}
	released, err := strconv.ParseInt(parts[1], 10, 64)
	require.NoError(t, err)
	until, err := strconv.ParseInt(parts[2], 10, 64)
	require.NoError(t, err)
	now := r.rdb.Time(ctx).Val().UnixMilli()
	if until <= now {
		return -1, -2
	}
	return released, until - now
}

// fence returns the last token in the fencing record of session (0 if
// none).
func (r *realEnv) fence(t *testing.T, session string) int64 {
	t.Helper()
	n, err := r.rdb.HGet(context.Background(), realKeys.Fencing(session), keyspace.FieldToken).Int64()
	if err == redis.Nil {
		return 0
	}
	require.NoError(t, err)
	return n
}

// gone waits (with a deadline) until the lease key of session has expired.
func (r *realEnv) gone(t *testing.T, session string) {
	t.Helper()
	require.Eventually(t, func() bool { return r.rdb.Exists(context.Background(), realKeys.Lease(session)).Val() == 0 },
		5*time.Second, 5*time.Millisecond, "lease key of %s never expired", session)
}

// tryAcquire returns the lease of session if m gets it now, else nil. It
// does not fail the test, so it may run inside a require.Eventually condition.
func tryAcquire(m *Manager, session string) *Lease {
	return m.Acquire(context.Background(), []string{session})[0].Lease
}

// Direct script calls, as the contract headers describe them.

// runAcquire returns the acquire reply as integers, three per session
// (token, pttl, gap: the due value is dropped, see runAcquireDue), with -1
// standing in the third place of a session held by another owner value;
// heldBy[i] is that value ("" for the others).
func runAcquire(t *testing.T, c redis.Scripter, ttlMs int64, owners map[string]string, sessions ...string) (vals []int64, heldBy []string) {
	t.Helper()
	all, heldBy := runAcquireDue(t, c, ttlMs, owners, sessions...)
	for i := range sessions {
		vals = append(vals, all[4*i:4*i+3]...)
	}
	return vals, heldBy
}

// runAcquireDue is runAcquire with all four values per session.
func runAcquireDue(t *testing.T, c redis.Scripter, ttlMs int64, owners map[string]string, sessions ...string) (vals []int64, heldBy []string) {
	t.Helper()
	ks := make([]string, 0, 2*len(sessions))
	args := []any{ttlMs, 0, ""}
	for _, s := range sessions {
		ks = append(ks, realKeys.Lease(s), realKeys.Fencing(s))
		args = append(args, owners[s], 1)
	}
	raw, err := redis.NewScript(lua.Acquire).Run(context.Background(), c, ks, args...).Slice()
	require.NoError(t, err)
	require.Len(t, raw, 4*len(sessions))
	heldBy = make([]string, len(sessions))
	for k, v := range raw {
		switch v := v.(type) {
		case int64:
			vals = append(vals, v)
		case string:
			require.Equal(t, 2, k%4, "only the third value of a session may be a string")
			require.Zero(t, raw[k-2], "an owner value comes only with token 0")
			heldBy[k/4] = v
			vals = append(vals, -1)
		default:
			t.Fatalf("reply value %d has type %T", k, v)
		}
	}
	return vals, heldBy
}

func runRenew(t *testing.T, c redis.Scripter, ttlMs int64, owners map[string]string, sessions ...string) []int64 {
	t.Helper()
	ks := make([]string, 0, len(sessions))
	args := []any{ttlMs}
	for _, s := range sessions {
		ks = append(ks, realKeys.Lease(s))
		args = append(args, owners[s], 1)
	}
	vals, err := redis.NewScript(lua.Renew).Run(context.Background(), c, ks, args...).Int64Slice()
	require.NoError(t, err)
	return vals
}

func runRelease(t *testing.T, r *realEnv, c redis.Scripter, owners map[string]string, sessions ...string) []int64 {
	t.Helper()
	ks := make([]string, 0, 2*len(sessions))
	args := []any{markTTL}
	for _, s := range sessions {
		ks = append(ks, realKeys.Lease(s), realKeys.Fencing(s))
		args = append(args, owners[s])
	}
	for range sessions {
		args = append(args, -1) // no next poll due
	}
	for _, s := range sessions {
		args = append(args, r.fence(t, s)) // the token released
	}
	vals, err := redis.NewScript(lua.Release).Run(context.Background(), c, ks, args...).Int64Slice()
	require.NoError(t, err)
	return vals
}

func runInspect(t *testing.T, c redis.Scripter, sessions ...string) []any {
	t.Helper()
	ks := make([]string, 0, 2*len(sessions))
	for _, s := range sessions {
		ks = append(ks, realKeys.Lease(s), realKeys.Fencing(s))
	}
	vals, err := redis.NewScript(lua.Inspect).Run(context.Background(), c, ks).Slice()
	require.NoError(t, err)
	return vals
}

// scriptHook counts the pipelines that carry script calls (EVALSHA/EVAL) and
// the SCRIPT LOAD commands. Connection set-up pipelines (HELLO, CLIENT
// SETINFO) carry no script and are not counted.
type scriptHook struct {
	mu        sync.Mutex
	pipelines []int // script calls per counted pipeline
	loads     int
}

var _ redis.Hook = (*scriptHook)(nil)

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) >= 2 && cmd.Name() == "script" && strings.EqualFold(argString(args[1]), "load") {
			h.mu.Lock()
			h.loads++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if name := c.Name(); name == "evalsha" || name == "eval" {
				n++
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.pipelines = append(h.pipelines, n)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// take returns the script calls of each pipeline and the number of SCRIPT
// LOADs since the last take, and resets both.
func (h *scriptHook) take() (pipelines []int, loads int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pipelines, loads = h.pipelines, h.loads
	h.pipelines, h.loads = nil, 0
	return pipelines, loads
}

func argString(a any) string {
	s, _ := a.(string)
	return s
}

// lossyDialer dials loopback connections whose next reply to a script call
// is lost once armed: the request reaches Redis and runs, the reply is read
// off the socket and thrown away, and the client sees the connection drop
// (io.EOF), as when a network blip hits after the server executed a command.
type lossyDialer struct {
	armed atomic.Bool
	drops atomic.Int32
}

func (d *lossyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, d: d}, nil
}

type lossyConn struct {
	net.Conn
	d       *lossyDialer
	drop    bool // the request just written is a script call to lose the reply of
	dropped bool // the connection was dropped
}

func (c *lossyConn) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("evalsha")) && c.d.armed.CompareAndSwap(true, false) {
		c.drop = true
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	switch {
	case c.dropped:
		return 0, io.EOF
	case !c.drop:
		return c.Conn.Read(p)
	}
	// Wait for the first byte of the reply (the script has run), then drop
	// the connection and report it closed.
	var b [1]byte
	_, _ = io.ReadFull(c.Conn, b[:])
	_ = c.Conn.Close()
	c.dropped = true
	c.d.drops.Add(1)
	return 0, io.EOF
}

// lossyClient returns a client whose connections come from d.
func lossyClient(t *testing.T, srv *redistest.Server, d *lossyDialer, maxRetries int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: d.dial, MaxRetries: maxRetries})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// beforeScripts runs a function once, just before the next pipeline of
// script calls is sent, as if the request were slow to leave.
type beforeScripts struct {
	mu sync.Mutex
	fn func()
}

var _ redis.Hook = (*beforeScripts)(nil)

func (h *beforeScripts) set(fn func()) {
	h.mu.Lock()
	h.fn = fn
	h.mu.Unlock()
}

func (h *beforeScripts) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforeScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *beforeScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		fn := h.fn
		h.fn = nil
		h.mu.Unlock()
		if fn != nil {
			fn()
		}
		return next(ctx, cmds)
	}
}

// waitState waits up to limit for l to reach st; it does not fail the test,
// so it may run outside the test goroutine.
func waitState(l *Lease, st State, limit time.Duration) bool {
	timeout := time.After(limit)
	for {
		ch := l.Changed()
		if l.State() == st {
			return true
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}
