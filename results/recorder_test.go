package results

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/internal/ring"
	"github.com/pollworker/pollworker/keyspace"
)

// runRecorder starts r.Run and returns a func that stops it and requires
// that Run returned nil. Run is stopped at cleanup too.
func runRecorder(t *testing.T, r *Recorder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { err = r.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() {
		cancel()
		wg.Wait()
		require.NoError(t, err)
	}
}

func result(session string, i int) Result {
	return Result{Session: session, Worker: "w1", Token: 1, Status: 200, At: time.UnixMilli(int64(1_000_000 + i))}
}

func streamLen(t *testing.T, c redis.Cmdable, streams ...string) int64 {
	t.Helper()
	var n int64
	for _, s := range streams {
		l, err := c.XLen(ctxT(t), s).Result()
		require.NoError(t, err)
		n += l
	}
	return n
}

func TestNewRecorder(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	tests := []struct {
		name string
		give RecorderConfig
		want string // "" for success
	}{
		{name: "defaults", give: RecorderConfig{Client: c}},
		{name: "no client", give: RecorderConfig{}, want: "Client is required"},
		{name: "bad keys", give: RecorderConfig{Client: c, Keys: keyspace.Space{Prefix: "x", SessionPrefix: "x"}}, want: "Keys"},
		{name: "negative maxlen", give: RecorderConfig{Client: c, MaxLen: -1}, want: "MaxLen must be positive"},
		{name: "negative queue", give: RecorderConfig{Client: c, QueueSize: -1}, want: "QueueSize must be positive"},
		{name: "negative batch", give: RecorderConfig{Client: c, BatchSize: -1}, want: "BatchSize must be positive"},
		{name: "negative interval", give: RecorderConfig{Client: c, FlushInterval: -1}, want: "FlushInterval must be positive"},
		{name: "negative timeout", give: RecorderConfig{Client: c, FlushTimeout: -1}, want: "FlushTimeout must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRecorder(tt.give)
			if tt.want == "" {
				require.NoError(t, err)
				require.EqualValues(t, DefaultStreamMaxLen, r.cfg.MaxLen)
				require.Equal(t, DefaultQueueSize, r.cfg.QueueSize)
				require.Equal(t, DefaultBatchSize, r.cfg.BatchSize)
				require.Equal(t, DefaultFlushInterval, r.cfg.FlushInterval)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRingDropsOldest(t *testing.T) {
	q := ring.New[Result](3)
	var dropped int
	for i := range 5 {
		if q.Push(result("s", i)) {
			dropped++
		}
	}
	require.Equal(t, 2, dropped)
	got := q.Drain(nil)
	require.Equal(t, []Result{result("s", 2), result("s", 3), result("s", 4)}, got)
	require.Empty(t, q.Drain(nil))
}

// TestRecorderBatches: N results cost at most ceil(N/BatchSize) pipelines
// (the ticker of the fake clock never fires: only full batches and the
// last flush send), and every result arrives.
func TestRecorderBatches(t *testing.T) {
	mr := miniredis.RunT(t)
	c := newClient(t, mr.Addr())
	count := &redistest.RoundTrips{}
	c.AddHook(count)
	const n, batch = 1050, 100
	r, err := NewRecorder(RecorderConfig{Client: c, BatchSize: batch, MaxLen: 1 << 20,
		Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	require.NoError(t, err)
	stop := runRecorder(t, r)
	for i := range n {
		r.Add(result("s"+strconv.Itoa(i%7), i))
	}
	stop()
	require.Zero(t, count.Commands.Load(), "nothing but pipelines")
	require.LessOrEqual(t, count.Pipelines.Load(), int64((n+batch-1)/batch))
	require.EqualValues(t, n, streamLen(t, c, keys.Results()))
	st := r.Stats()
	require.Equal(t, RecorderStats{Queued: n, Written: n, Flushes: uint64(count.Pipelines.Load())}, st)
}

func TestRecorderFlushesOnTickAndOnStop(t *testing.T) {
	mr := miniredis.RunT(t)
	c := newClient(t, mr.Addr())
	fc := clocktesting.NewFakeClock(time.Unix(0, 0))
	r, err := NewRecorder(RecorderConfig{Client: c, Clock: fc})
	require.NoError(t, err)
	stop := runRecorder(t, r)

	r.Add(result("s1", 1))
	require.Eventually(t, fc.HasWaiters, 5*time.Second, time.Millisecond, "the ticker")
	fc.Step(DefaultFlushInterval)
	require.Eventually(t, func() bool { return streamLen(t, c, keys.Results()) == 1 }, 5*time.Second, time.Millisecond)

	// Added after the last tick: the stop flushes them.
	r.Add(result("s1", 2))
	r.Add(result("s2", 3))
	stop()
	require.EqualValues(t, 3, streamLen(t, c, keys.Results()))
	require.EqualValues(t, 3, r.Stats().Written)

	err = r.Run(context.Background())
	require.ErrorIs(t, err, ErrRecorderRunning)
}

// blackhole is a TCP listener that accepts connections and never answers:
// a Redis that hangs until hangup closes the listener and the connections.
func blackhole(t *testing.T) (addr string, hangup func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	hangup = sync.OnceFunc(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	t.Cleanup(hangup)
	return ln.Addr().String(), hangup
}

// TestRecorderDropsOldestWhenRedisHangs: with Redis not answering, Add
// goes on at full speed, the queue keeps the newest QueueSize results and
// counts the rest as dropped, and Run still returns within its bound.
func TestRecorderDropsOldestWhenRedisHangs(t *testing.T) {
	addr, hangup := blackhole(t)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	const queue = 100
	// The first flush hangs until hangup: its timeout is beyond the test.
	r, err := NewRecorder(RecorderConfig{Client: c, QueueSize: queue, BatchSize: 10, FlushTimeout: time.Hour})
	require.NoError(t, err)
	stop := runRecorder(t, r)

	const polls = 1000
	for i := range polls {
		r.Add(result("s", i))
	}
	// The polls are done while the first flush still hangs: at most one
	// batch (<= queue) is in flight, the queue holds queue, the rest went.
	st := r.Stats()
	require.EqualValues(t, polls, st.Queued)
	require.GreaterOrEqual(t, st.Dropped, uint64(polls-2*queue))
	require.Zero(t, st.Written)

	hangup() // the flush in flight fails, and so does the last one
	stop()
	st = r.Stats()
	require.Equal(t, st.Queued, st.Written+st.Failed+st.Dropped)
	require.Positive(t, st.Failed)
}

// TestRecorderSharded spreads results over the sharded streams by bucket
// range, each capped at MaxLen/ResultStreams.
func TestRecorderSharded(t *testing.T) {
	mr := miniredis.RunT(t)
	c := newClient(t, mr.Addr())
	r, err := NewRecorder(RecorderConfig{Client: c, Sharded: true, MaxLen: 16 * 1000})
	require.NoError(t, err)
	stop := runRecorder(t, r)
	for i := range 800 {
		r.Add(result("s"+strconv.Itoa(i), i))
	}
	stop()
	require.Zero(t, streamLen(t, c, keys.Results()))
	used := 0
	for i := range keyspace.ResultStreams {
		if n := streamLen(t, c, keys.ResultStream(i)); n > 0 {
			used++
		}
	}
	require.Equal(t, keyspace.ResultStreams, used, "800 sessions reach every stream")
	require.EqualValues(t, 800, streamLen(t, c, allStreams(keys)...))
	msgs, err := c.XRange(ctxT(t), keys.ResultStreamOf("s7"), "-", "+").Result()
	require.NoError(t, err)
	require.Contains(t, sessionsOf(msgs), "s7")
	require.EqualValues(t, 1000, r.streamMaxLen())
}

func sessionsOf(msgs []redis.XMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Values["session"].(string))
	}
	return out
}

// TestRecorderWarnsAtTheFirstDrop: results pushed out of a full queue are
// counted, and the first is logged (a Recorder whose Run was never
// started lost them without a word).
func TestRecorderWarnsAtTheFirstDrop(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	core, logs := observer.New(zapcore.WarnLevel)
	r, err := NewRecorder(RecorderConfig{Client: c, QueueSize: 2, BatchSize: 2, Logger: zap.New(core)})
	require.NoError(t, err)
	for i := range 5 {
		r.Add(Result{Session: "s" + strconv.Itoa(i)})
	}
	require.EqualValues(t, 3, r.Stats().Dropped)
	require.Equal(t, 1, logs.FilterMessageSnippet("results queue full").Len(), "logged once")
	require.Equal(t, false, logs.All()[0].ContextMap()["run_started"])
}
