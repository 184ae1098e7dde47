package results

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/internal/failurelog"
	"github.com/pollworker/pollworker/internal/ring"
	"github.com/pollworker/pollworker/keyspace"
)

// Defaults of RecorderConfig.
const (
	// DefaultQueueSize is how many results wait for a flush at most.
	DefaultQueueSize = 10_000
	// DefaultBatchSize is how many waiting results start a flush early.
	DefaultBatchSize = 500
	// DefaultFlushInterval is the longest a result waits for its flush.
	DefaultFlushInterval = 100 * time.Millisecond
	// DefaultFlushTimeout bounds the pipeline of one flush.
	DefaultFlushTimeout = 2 * time.Second
)

// ErrRecorderRunning is returned by a second call of Recorder.Run.
var ErrRecorderRunning = errors.New("results: recorder already run")

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// Client receives the results. Required. Give the recorder a client of
	// its own (its own small pool): a flush then never holds a connection
	// that the coordinator's heartbeat, renewals or rounds wait for.
	Client redis.Cmdable
	// Keys names the streams; the zero value uses the default prefix.
	Keys keyspace.Space
	// Sharded spreads the results over keyspace.ResultStreams streams by
	// the session's bucket range (keyspace.Space.ResultStreamOf), whose
	// hash tags spread over the hash slots: use it with Redis Cluster.
	// Otherwise every result goes to keyspace.Space.Results. Default false.
	Sharded bool
	// MaxLen is the approximate number of entries kept over all streams;
	// each sharded stream keeps MaxLen / ResultStreams (XADD MAXLEN ~).
	// Default DefaultStreamMaxLen.
	MaxLen int64
	// QueueSize bounds the results waiting for a flush; when full, the
	// oldest is dropped and counted (RecorderStats.Dropped). Default
	// DefaultQueueSize.
	QueueSize int
	// BatchSize waiting results start a flush before FlushInterval is up.
	// Default DefaultBatchSize; at most QueueSize.
	BatchSize int
	// FlushInterval is the longest a result waits before its flush starts.
	// Default DefaultFlushInterval.
	FlushInterval time.Duration
	// FlushTimeout bounds one flush (one pipeline), the last one included.
	// Default DefaultFlushTimeout.
	FlushTimeout time.Duration
	// Logger receives write failures and the first result dropped from a
	// full queue; default zap.NewNop().
	Logger *zap.Logger
	// Clock drives the flush ticker; default the real clock.
	Clock clock.WithTicker
}

// RecorderStats are a Recorder's counters since it was made; all only go
// up. Queued = Written + Failed + Dropped + the results waiting.
type RecorderStats struct {
	// Queued results were handed to Add.
	Queued uint64
	// Written results were added to a stream.
	Written uint64
	// Failed results were in a flush that Redis did not take (error or
	// FlushTimeout); they are not retried.
	Failed uint64
	// Dropped results were pushed out of a full queue, oldest first,
	// because Redis was slower than the polls.
	Dropped uint64
	// Unchanged results were not queued because they repeated the
	// session's last one (RecordChanges).
	Unchanged uint64
	// Flushes counts the pipelines sent (one round trip per master each).
	Flushes uint64
}

// Recorder writes poll results to the results streams in batches: Add
// queues a result and never blocks; the goroutine of Run sends what is
// queued in one pipeline every FlushInterval, or as soon as BatchSize
// results wait. Memory is bounded by QueueSize waiting results plus one
// batch in flight. When Redis is slower than the polls, the oldest waiting
// results are dropped and counted; polls never wait for Redis.
//
// The owner calls Run once, in a goroutine of its own, and cancels its
// context after the last Add (for pollworker run: after the coordinator's
// drain); Run then flushes what is left within FlushTimeout and returns.
// Results added after Run returned are never written.
type Recorder struct {
	cfg RecorderConfig
	log *zap.Logger

	kick    chan struct{} // capacity 1: BatchSize results wait
	running atomic.Bool

	mu    sync.Mutex
	queue *ring.Ring[Result] // waiting results

	queued, written, failed, dropped, unchanged, flushes atomic.Uint64
	flushLog                                             failurelog.Log
	dropWarned                                           atomic.Bool // the first drop was logged
}

// NewRecorder validates cfg, fills in its defaults and returns a Recorder.
// It starts nothing and does not touch Redis.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: recorder: Client is required", ErrConfig)
	}
	if err := cfg.Keys.Validate(); err != nil {
		return nil, fmt.Errorf("%w: recorder: Keys: %w", ErrConfig, err)
	}
	for _, f := range []struct {
		name string
		v    *int64
		def  int64
	}{
		{"MaxLen", &cfg.MaxLen, DefaultStreamMaxLen},
	} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return nil, fmt.Errorf("%w: recorder: %s must be positive, got %d", ErrConfig, f.name, *f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"QueueSize", &cfg.QueueSize, DefaultQueueSize},
		{"BatchSize", &cfg.BatchSize, DefaultBatchSize},
	} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return nil, fmt.Errorf("%w: recorder: %s must be positive, got %d", ErrConfig, f.name, *f.v)
		}
	}
	cfg.BatchSize = min(cfg.BatchSize, cfg.QueueSize)
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"FlushInterval", &cfg.FlushInterval, DefaultFlushInterval},
		{"FlushTimeout", &cfg.FlushTimeout, DefaultFlushTimeout},
	} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return nil, fmt.Errorf("%w: recorder: %s must be positive, got %v", ErrConfig, f.name, *f.v)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Recorder{
		cfg:      cfg,
		log:      cfg.Logger,
		kick:     make(chan struct{}, 1),
		queue:    ring.New[Result](cfg.QueueSize),
		flushLog: failurelog.Log{What: "recording poll results"},
	}, nil
}

// streamMaxLen is the cap of each stream.
func (r *Recorder) streamMaxLen() int64 {
	if r.cfg.Sharded {
		return max(1, r.cfg.MaxLen/keyspace.ResultStreams)
	}
	return r.cfg.MaxLen
}

// Add queues res for the next flush. It never blocks on Redis: when the
// queue is full, the oldest waiting result is dropped. Safe for concurrent
// use.
func (r *Recorder) Add(res Result) {
	r.queued.Add(1)
	r.mu.Lock()
	dropped := r.queue.Push(res)
	full := r.queue.Len() >= r.cfg.BatchSize
	r.mu.Unlock()
	if dropped {
		r.dropped.Add(1)
		if r.dropWarned.CompareAndSwap(false, true) {
			// Once: the count goes on in RecorderStats.Dropped.
			r.cfg.Logger.Warn("results queue full: dropping the oldest results (counted in Dropped); is the Recorder's Run running, and Redis reachable?",
				zap.Bool("run_started", r.running.Load()), zap.Int("queue_size", r.cfg.QueueSize))
		}
	}
	if full {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// Unchanged counts a result that was not added because it repeated its
// session's last one (RecordChanges): RecorderStats.Unchanged.
func (r *Recorder) Unchanged() { r.unchanged.Add(1) }

// Stats returns the counters. Safe for concurrent use; meant for metrics.
func (r *Recorder) Stats() RecorderStats {
	return RecorderStats{
		Queued: r.queued.Load(), Written: r.written.Load(), Failed: r.failed.Load(),
		Dropped: r.dropped.Load(), Unchanged: r.unchanged.Load(), Flushes: r.flushes.Load(),
	}
}

// Run flushes the queue every FlushInterval, and whenever BatchSize results
// wait, until ctx is done; it then flushes what is left and returns nil, so
// it returns within about 2 × FlushTimeout of ctx's end (a flush in
// flight, then the last one). Flushes keep ctx's values but not its
// cancellation. It returns ErrRecorderRunning if called a second time. It
// starts no goroutine of its own (a Cluster client's pipeline uses one per
// master, joined before the flush returns).
func (r *Recorder) Run(ctx context.Context) error {
	if r.running.Swap(true) {
		return ErrRecorderRunning
	}
	ticker := r.cfg.Clock.NewTicker(r.cfg.FlushInterval)
	defer ticker.Stop()
	fctx := context.WithoutCancel(ctx)
	var batch []Result
	for {
		select {
		case <-ctx.Done():
			r.flush(fctx, batch[:0])
			return nil
		case <-ticker.C():
		case <-r.kick:
		}
		batch = r.flush(fctx, batch[:0])
	}
}

// flush takes every waiting result into batch and writes them in one
// pipeline bounded by FlushTimeout. It returns batch for reuse.
func (r *Recorder) flush(ctx context.Context, batch []Result) []Result {
	r.mu.Lock()
	batch = r.queue.Drain(batch)
	r.mu.Unlock()
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.FlushTimeout)
	defer cancel()
	failed, err := Write(ctx, r.cfg.Client, r.cfg.Keys, r.cfg.Sharded, r.streamMaxLen(), batch)
	r.flushes.Add(1)
	r.written.Add(uint64(len(batch) - failed))
	r.failed.Add(uint64(failed))
	if err != nil {
		r.flushLog.Failed(r.log, zap.Int("results", len(batch)), zap.Int("failed", failed), zap.Error(err))
	} else {
		r.flushLog.Succeeded(r.log)
	}
	clear(batch) // let the strings go
	return batch
}
