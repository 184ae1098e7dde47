package poller_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
)

// BenchmarkHeldSessionMemory measures the live Go heap one held session
// costs a worker as `pollworker run --record all` runs it: one Coordinator
// with the built-in httppoll.Poller (state kept, results through a
// Recorder) holds N sessions at 1 s against a local target on a real
// redis-server. It reports the heap in use and the heap objects per
// session after a GC, once every session has been polled three times on average,
// against the same figures before the Coordinator started.
//
// Set POLLWORKER_HEAP_PROFILE=FILE to write a heap profile at that point
// (then: go tool pprof -top -sample_index=inuse_space FILE); it records
// every allocation then, which makes the run slower.
//
// Run: go test -run '^$' -bench BenchmarkHeldSessionMemory -benchtime 1x ./poller
func BenchmarkHeldSessionMemory(b *testing.B) {
	for _, n := range []int{10_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			for b.Loop() {
				bytes, objects := heldSessionMemory(b, n)
				b.ReportMetric(bytes, "B/session")
				b.ReportMetric(objects, "objects/session")
			}
		})
	}
}

func heldSessionMemory(b *testing.B, n int) (bytesPer, objectsPer float64) {
	b.Helper()
	if os.Getenv("POLLWORKER_HEAP_PROFILE") != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1 // every allocation, for an exact profile
		defer func() { runtime.MemProfileRate = old }()
	}
	srv := redistest.Start(b)
	client := srv.Client(b)
	var polls atomic.Int64
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		polls.Add(1)
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte("ok"))
	}))
	b.Cleanup(tg.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := keyspace.Space{}
	store, err := session.NewStore(client, keys)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := lease.MarkFresh(ctx, client, keys); err != nil {
		b.Fatal(err)
	}
	sessions := make([]session.Session, n)
	for i := range sessions {
		id := "s" + strconv.Itoa(i)
		sessions[i] = session.Session{ID: id, URL: tg.URL + "/s/" + id, Interval: session.Duration(time.Second)}
	}
	if err := store.PutMany(ctx, sessions); err != nil {
		b.Fatal(err)
	}
	sessions = nil

	rec, err := results.NewRecorder(results.RecorderConfig{Client: srv.Client(b), Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	hp, err := httppoll.New(httppoll.Config{Keys: keys, Worker: "w1", Recorder: rec})
	if err != nil {
		b.Fatal(err)
	}
	c, err := poller.New(poller.Config{Client: client, Keys: keys, ID: "w1", Poller: hp, Stateful: true})
	if err != nil {
		b.Fatal(err)
	}
	before, beforeObjects := liveHeap()

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = rec.Run(runCtx); done <- struct{}{} }()
	go func() { _ = c.Run(runCtx); done <- struct{}{} }()
	defer func() {
		stop()
		<-done
		<-done
	}()

	deadline := time.Now().Add(time.Minute)
	for c.PollStats().LeasesHeld < n || polls.Load() < int64(3*n) {
		if time.Now().After(deadline) {
			b.Fatalf("after 1m: %d of %d leases held, %d polls", c.PollStats().LeasesHeld, n, polls.Load())
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond): // poll the condition
		}
	}
	after, afterObjects := liveHeap()
	if path := os.Getenv("POLLWORKER_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(after-before) / float64(n), float64(afterObjects-beforeObjects) / float64(n)
}

// liveHeap returns the heap in use and the live heap objects after a GC.
func liveHeap() (bytes, objects uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapObjects
}
