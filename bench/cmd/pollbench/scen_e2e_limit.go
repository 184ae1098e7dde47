package main

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/results"
)

// The physical limit of the e2e scenario: the least a program can do to
// GET the same URLs on the same schedule. One goroutine pops a timer heap
// of (next due, session); each due session is polled on a goroutine of its
// own by one keep-alive http.Client; session i's phase within the interval
// is a hash of its id (as Prometheus spreads scrape offsets), and each
// session stays on its grid (due += interval, no drift). As in a
// Prometheus scrape loop, a session whose previous poll is still running
// when the next falls due skips that one (counted), so that a slow target
// cannot pile up requests and connections without bound. With Redis set,
// every result is queued and written by one pipelined XADD per flush.
//
// The e2e scenario runs it as a child process of pollbench (so its CPU and
// memory are measured from /proc as the worker's are): pollbench re-executes
// itself with limitEnv naming a JSON limitConfig file.

// limitEnv names the config file of a limit child process.
const limitEnv = "POLLBENCH_E2E_LIMIT"

func init() {
	// A child started by the e2e scenario runs the limit loop and exits,
	// before main (or a test) runs.
	if path := os.Getenv(limitEnv); path != "" {
		os.Exit(limitChildMain(path))
	}
}

// limitConfig is what the limit loop polls and where it records.
type limitConfig struct {
	IDs       []string      `json:"ids"`
	URLPrefix string        `json:"url_prefix"` // URL of id = URLPrefix + id
	Interval  time.Duration `json:"interval"`
	Worker    string        `json:"worker"`          // sent in X-Poll-Worker
	Redis     string        `json:"redis,omitempty"` // host:port; "" = do not record
	Stream    string        `json:"stream,omitempty"`
	MaxLen    int64         `json:"maxlen,omitempty"`
	Flush     time.Duration `json:"flush,omitempty"`
	// Slack, if positive, lets the timer fire this long after the earliest
	// poll is due, every poll due by then starting with it (as the worker's
	// poller.TimerSlack): the limit on the worker's looser schedule.
	Slack time.Duration `json:"slack,omitempty"`
}

func limitChildMain(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "limit:", err)
		return 1
	}
	var cfg limitConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "limit:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runLimit(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "limit:", err)
		return 1
	}
	return 0
}

// limitItem is one session in the heap.
type limitItem struct {
	due time.Time
	i   int
}

type limitHeap []limitItem

func (h limitHeap) Len() int           { return len(h) }
func (h limitHeap) Less(a, b int) bool { return h[a].due.Before(h[b].due) }
func (h limitHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *limitHeap) Push(x any)        { *h = append(*h, x.(limitItem)) }
func (h *limitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// spreadOffset is a session's phase within interval: a hash of its id.
func spreadOffset(id string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return time.Duration(h.Sum64() % uint64(interval))
}

// runLimit polls cfg's sessions until ctx ends, then waits for the polls
// and the last flush.
func runLimit(ctx context.Context, cfg limitConfig) error {
	if len(cfg.IDs) == 0 || cfg.Interval <= 0 {
		return fmt.Errorf("limit: no sessions or no interval")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep-alive with no idle cap: a connection opened for a concurrent
	// poll is kept for the next one, never closed and dialled again.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 1 << 20
	hc := &http.Client{Transport: tr}
	defer hc.CloseIdleConnections()

	var rec *limitRecorder
	recDone := make(chan struct{})
	if cfg.Redis != "" {
		client := redis.NewClient(&redis.Options{Addr: cfg.Redis})
		defer client.Close()
		rec = &limitRecorder{client: client, stream: cfg.Stream, maxLen: cfg.MaxLen, flush: cfg.Flush}
		go func() { defer close(recDone); rec.run(ctx) }()
	} else {
		close(recDone)
	}

	urls := make([]string, len(cfg.IDs))
	for i, id := range cfg.IDs {
		urls[i] = cfg.URLPrefix + id
	}
	now := time.Now()
	base := now.Truncate(cfg.Interval)
	h := make(limitHeap, len(cfg.IDs))
	for i, id := range cfg.IDs {
		due := base.Add(spreadOffset(id, cfg.Interval))
		if due.Before(now) {
			due = due.Add(cfg.Interval)
		}
		h[i] = limitItem{due: due, i: i}
	}
	heap.Init(&h)

	var wg sync.WaitGroup
	defer wg.Wait()
	inFlight := make([]atomic.Bool, len(cfg.IDs))
	var skipped atomic.Int64
	defer func() {
		if n := skipped.Load(); n > 0 {
			fmt.Fprintf(os.Stderr, "limit: %d polls skipped, the previous still running\n", n)
		}
	}()
	poll := func(i int) {
		defer wg.Done()
		defer inFlight[i].Store(false)
		start := time.Now()
		status, err := limitGet(ctx, hc, urls[i], cfg.IDs[i], cfg.Worker, cfg.Interval)
		if rec != nil {
			r := results.Result{Session: cfg.IDs[i], Worker: cfg.Worker, Status: status, Latency: time.Since(start), At: start}
			if err != nil {
				r.Error = err.Error()
			}
			rec.add(r)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if d := time.Until(h[0].due); d > 0 {
			timer.Reset(d + cfg.Slack)
			select {
			case <-ctx.Done():
				<-recDone
				return nil
			case <-timer.C:
			}
		}
		now := time.Now()
		for !h[0].due.After(now) {
			if i := h[0].i; inFlight[i].CompareAndSwap(false, true) {
				wg.Add(1)
				go poll(i)
			} else {
				skipped.Add(1)
			}
			h[0].due = h[0].due.Add(cfg.Interval)
			heap.Fix(&h, 0)
		}
	}
}

// limitGet sends one GET with the worker's headers and drains the body.
func limitGet(ctx context.Context, hc *http.Client, url, id, worker string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(httppoll.HeaderSession, id)
	req.Header.Set(httppoll.HeaderWorker, worker)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, httppoll.MaxBodyBytes))
	_ = resp.Body.Close()
	return resp.StatusCode, err
}

// limitRecorder queues results and writes them with one pipelined XADD per
// flush, the fields as httppoll records them.
type limitRecorder struct {
	client *redis.Client
	stream string
	maxLen int64
	flush  time.Duration

	mu    sync.Mutex
	queue []results.Result
}

func (r *limitRecorder) add(res results.Result) {
	r.mu.Lock()
	r.queue = append(r.queue, res)
	r.mu.Unlock()
}

func (r *limitRecorder) run(ctx context.Context) {
	t := time.NewTicker(r.flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r.write(fctx)
			cancel()
			return
		case <-t.C:
			r.write(ctx)
		}
	}
}

func (r *limitRecorder) write(ctx context.Context) {
	r.mu.Lock()
	batch := r.queue
	r.queue = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	pipe := r.client.Pipeline()
	for _, res := range batch {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: r.stream, MaxLen: r.maxLen, Approx: true, Values: []any{
			"session", res.Session, "worker", res.Worker, "token", 0, "status", res.Status,
			"latency_ms", strconv.FormatFloat(float64(res.Latency)/float64(time.Millisecond), 'f', 3, 64),
			"error", res.Error, "at", res.At.UnixMilli()}})
	}
	_, _ = pipe.Exec(ctx)
}
