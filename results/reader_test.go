package results

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// write records results through a Recorder of layout sharded and waits for
// them.
func write(t *testing.T, c redis.Cmdable, sharded bool, rs ...Result) {
	t.Helper()
	_, err := Write(ctxT(t), c, keys, sharded, 1000, rs)
	require.NoError(t, err)
}

func sessionsOfEntries(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Session
	}
	return out
}

// TestReaderMergesInTimeOrder: results of both layouts, written out of
// order across streams, come back sorted by poll start.
func TestReaderMergesInTimeOrder(t *testing.T) {
	c := redistest.Start(t).Client(t)
	r, err := NewReader(c, keys)
	require.NoError(t, err)

	base := time.Now().Truncate(time.Millisecond)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// Sessions s0..s39 land in many sharded streams; written newest first.
	for i := 39; i >= 0; i-- {
		write(t, c, true, Result{Session: "s" + strconv.Itoa(i), Worker: "w1", Token: 3, Status: 200, At: at(i), Latency: 1500 * time.Microsecond})
	}
	// An entry recorded long ago (by its stream id), for Since.
	require.NoError(t, c.XAdd(ctxT(t), &redis.XAddArgs{Stream: keys.Results(), ID: "1000-0",
		Values: Result{Session: "ancient", At: time.UnixMilli(1)}.values()}).Err())
	write(t, c, false, Result{Session: "old", Worker: "w0", Status: 503, Error: "server error", At: at(-1)})

	got, cur, err := r.Read(ctxT(t), Query{Limit: 100})
	require.NoError(t, err)
	want := []string{"ancient", "old"}
	for i := range 40 {
		want = append(want, "s"+strconv.Itoa(i))
	}
	require.Equal(t, want, sessionsOfEntries(got))
	require.Equal(t, Result{Session: "s5", Worker: "w1", Token: 3, Status: 200, At: at(5), Latency: 1500 * time.Microsecond}, got[7].Result)
	require.Len(t, cur, 1+keyspace.ResultStreams)

	// Limit keeps the most recently recorded (stream id), shown by start.
	lim := keyspace.Space{Prefix: "lim"}
	for i, e := range []struct {
		id string
		at int64
	}{{"5000-0", 3}, {"6000-0", 1}, {"7000-0", 2}} {
		require.NoError(t, c.XAdd(ctxT(t), &redis.XAddArgs{Stream: lim.ResultStream(i), ID: e.id,
			Values: Result{Session: e.id, At: time.UnixMilli(e.at)}.values()}).Err())
	}
	lr, err := NewReader(c, lim)
	require.NoError(t, err)
	got, _, err = lr.Read(ctxT(t), Query{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"6000-0", "7000-0"}, sessionsOfEntries(got))

	got, _, err = r.Read(ctxT(t), Query{Since: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 41, "ancient is older than an hour")

	got, _, err = r.Read(ctxT(t), Query{Session: "s7"})
	require.NoError(t, err)
	require.Equal(t, []string{"s7"}, sessionsOfEntries(got))
	require.Equal(t, keys.ResultStreamOf("s7"), got[0].Stream)

	_, _, err = r.Read(ctxT(t), Query{Limit: -1})
	require.ErrorIs(t, err, ErrConfig)
}

// follow runs r.Follow in the background and returns the channel of the
// entries it delivers and a func that stops it and returns its error.
func follow(t *testing.T, r *Reader, q Query, cur Cursor) (<-chan Entry, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Entry, 1000)
	done := make(chan error, 1)
	go func() {
		done <- r.Follow(ctx, q, cur, func(es []Entry) error {
			for _, e := range es {
				out <- e
			}
			return nil
		})
	}()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Error("Follow did not return")
			return nil
		}
	})
	t.Cleanup(func() { _ = stop() })
	return out, stop
}

func receive(t *testing.T, ch <-chan Entry, n int) []string {
	t.Helper()
	var got []string
	require.Eventually(t, func() bool {
		for {
			select {
			case e := <-ch:
				got = append(got, e.Session)
			default:
				return len(got) >= n
			}
		}
	}, 10*time.Second, 5*time.Millisecond)
	return got
}

func TestReaderFollow(t *testing.T) {
	c := redistest.Start(t).Client(t)
	r, err := NewReader(c, keys)
	require.NoError(t, err)
	write(t, c, false, Result{Session: "before", At: time.Now()})
	_, cur, err := r.Read(ctxT(t), Query{})
	require.NoError(t, err)

	ch, stop := follow(t, r, Query{}, cur)
	now := time.Now()
	write(t, c, true, Result{Session: "a", At: now}, Result{Session: "b", At: now.Add(time.Millisecond)})
	write(t, c, false, Result{Session: "c", At: now.Add(2 * time.Millisecond)})
	got := receive(t, ch, 3)
	require.ElementsMatch(t, []string{"a", "b", "c"}, got, "not before: the cursor is after it")
	require.NoError(t, stop())

	// Filtered by session.
	_, cur, err = r.Read(ctxT(t), Query{Session: "b"})
	require.NoError(t, err)
	ch, stop = follow(t, r, Query{Session: "b"}, cur)
	write(t, c, true, Result{Session: "a", At: now}, Result{Session: "b", At: now})
	require.Equal(t, []string{"b"}, receive(t, ch, 1))
	require.NoError(t, stop())
}

// TestReaderChanged: the changed flag, the body hash and the body make
// the round trip through a stream; Query.Changed keeps only the changes,
// in Read (scanning past unchanged entries) and in Follow; an entry
// without the fields (an older worker's) reads as unchanged.
func TestReaderChanged(t *testing.T) {
	mr := miniredis.RunT(t)
	c := newClient(t, mr.Addr())
	r, err := NewReader(c, keys)
	require.NoError(t, err)
	at := time.UnixMilli(1_800_000_000_000)
	first := Result{Session: "s1", Worker: "w1", Token: 3, Status: 200, At: at, Changed: true,
		BodySHA256: "ab12", Body: "{\"v\":1}"}
	write(t, c, false, first)
	pipe := c.Pipeline()
	for i := range 2500 { // more than a chunk of unchanged entries, untrimmed
		pipe.XAdd(ctxT(t), &redis.XAddArgs{Stream: keys.Results(), Values: Result{Session: "s1", Worker: "w1", Token: 3,
			Status: 200, At: at.Add(time.Duration(i+1) * time.Millisecond), BodySHA256: "ab12"}.values()})
	}
	_, err = pipe.Exec(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, c.XAdd(ctxT(t), &redis.XAddArgs{Stream: keys.Results(),
		Values: []any{"session", "old", "status", "200", "at", "1"}}).Err())

	got, cur, err := r.Read(ctxT(t), Query{Changed: true, Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, first, got[0].Result)

	ch, stop := follow(t, r, Query{Changed: true}, cur)
	second := Result{Session: "s1", Worker: "w2", Token: 4, Status: 200, At: at.Add(time.Hour), Changed: true, BodySHA256: "cd34"}
	for _, res := range []Result{{Session: "s1", Worker: "w2", Token: 4, Status: 200, At: at.Add(time.Hour), BodySHA256: "ab12"}, second} {
		require.NoError(t, c.XAdd(ctxT(t), &redis.XAddArgs{Stream: keys.Results(), Values: res.values()}).Err())
	}
	require.Equal(t, []string{"s1"}, receive(t, ch, 1))
	require.NoError(t, stop())
	got, _, err = r.Read(ctxT(t), Query{Changed: true})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, second, got[1].Result)
}

// TestRecorderAndReaderOnCluster: the sharded streams spread over every
// master of a 3-master Cluster, and the reader merges them back, then
// follows them (one XREAD BLOCK per stream).
func TestRecorderAndReaderOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	rec, err := NewRecorder(RecorderConfig{Client: c, Sharded: true})
	require.NoError(t, err)
	stop := runRecorder(t, rec)
	base := time.Now()
	for i := range 300 {
		rec.Add(Result{Session: "s" + strconv.Itoa(i), Worker: "w1", Status: 200, At: base.Add(time.Duration(i) * time.Millisecond)})
	}
	stop()
	require.EqualValues(t, 300, rec.Stats().Written)
	for _, s := range cl.Servers {
		n, err := s.Client(t).DBSize(ctxT(t)).Result()
		require.NoError(t, err)
		require.Positive(t, n, "master %s holds some streams", s.Addr())
	}

	r, err := NewReader(c, keys)
	require.NoError(t, err)
	got, cur, err := r.Read(ctxT(t), Query{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, got, 300)
	for i, e := range got {
		require.Equal(t, "s"+strconv.Itoa(i), e.Session)
	}

	ch, stopFollow := follow(t, r, Query{}, cur)
	write(t, c, true, Result{Session: "x1", At: time.Now()}, Result{Session: "x2", At: time.Now()}, Result{Session: "x3", At: time.Now()})
	require.ElementsMatch(t, []string{"x1", "x2", "x3"}, receive(t, ch, 3))
	require.NoError(t, stopFollow())
}
