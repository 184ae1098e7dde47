package poller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/lease"
)

// health is what the worker reports about itself; atomics, written by the
// main loop and the background loops, read by Ready, Status and the
// metrics from any goroutine.
type health struct {
	redisOK         atomic.Bool
	heartbeatAt     atomic.Int64 // clock time (UnixNano) of the last successful heartbeat
	redisFull       atomic.Bool  // the last heartbeat found Redis over maxmemory (nodes.Registry.OverMaxmemory)
	evictionWarning atomic.Bool  // Redis runs an evicting maxmemory-policy
	shareTaken      atomic.Bool  // held its planned share once since start (or readyBound passed)
	peerRoom        atomic.Bool  // a peer kept up as of the last read of the members' infos (peersWithRoom)
	pollPanics      atomic.Int64
	observerPanics  atomic.Int64
	pollErrors      atomic.Int64
	polls           atomic.Int64

	// What isLive and redisFailed use: set by newHealth, never changed.
	clock clock.WithTickerAndDelayedExecution
	fresh time.Duration // how long a heartbeat counts: heartbeatFresh
	obs   Observer
	log   *zap.Logger

	readsMu sync.Mutex
	reads   map[string]string // by what: the error of the failing read last logged at warn level

	// stopped is set when Run returns (markStopped): the worker is not
	// ready, and calls to the Observer from polls still running (a Poll
	// that ignored its cancellation past DrainTimeout) are dropped.
	stoppedMu sync.RWMutex // held (read) by whileRunning's callbacks
	stopped   atomic.Bool  // written under stoppedMu, read without it
}

// markStopped marks Run returned, after the callbacks under way
// (whileRunning) have ended.
func (h *health) markStopped() {
	h.stoppedMu.Lock()
	h.stopped.Store(true)
	h.stoppedMu.Unlock()
}

// whileRunning calls f unless Run has returned; Run does not return while
// f runs.
func (h *health) whileRunning(f func()) {
	h.stoppedMu.RLock()
	defer h.stoppedMu.RUnlock()
	if !h.stopped.Load() {
		f()
	}
}

// isStopped reports whether Run has returned. It takes no lock, so that
// a callback under whileRunning may call Ready.
func (h *health) isStopped() bool { return h.stopped.Load() }

// newHealth returns the health of a worker whose heartbeats count for
// fresh on clk, reporting Redis failures to obs and log.
// heartbeatFresh is how long after it was sent a heartbeat of TTL ttl
// keeps this worker live in its own eyes: ttl less a drift margin, the
// lease's (drift), but at most ttl's own default margin (ttl/100 + 2ms),
// which clock rates drift in proportion to. With drift alone (the lease
// TTL's), a heartbeat TTL much shorter than the lease's (a 3-minute lease,
// a 150 ms heartbeat) counted for no time at all, and the worker, never
// live, took no session.
func heartbeatFresh(ttl, drift time.Duration) time.Duration {
	return ttl - min(drift, lease.DefaultDriftMargin(ttl))
}

func newHealth(clk clock.WithTickerAndDelayedExecution, fresh time.Duration, obs Observer, log *zap.Logger) *health {
	return &health{clock: clk, fresh: fresh, obs: obs, log: log, reads: map[string]string{}}
}

// isLive reports whether the worker holds a fresh heartbeat and reached
// Redis on its last attempt, and Redis has room (noteMemoryPressure):
// what it needs to take sessions.
func (h *health) isLive() bool { return h.notLive() == "" }

// notLive says why the worker is not live (isLive), "" when it is.
func (h *health) notLive() string {
	switch at := h.heartbeatAt.Load(); {
	case h.isStopped():
		return "stopped: Run returned"
	case at == 0:
		return "no heartbeat written yet"
	case !h.redisOK.Load():
		return "its last request to Redis failed" + h.failing()
	case h.redisFull.Load():
		return "Redis is over maxmemory: it takes no session until Redis has room (it keeps polling those it holds)"
	case h.clock.Since(time.Unix(0, at)) >= h.fresh:
		return "its last heartbeat is " + h.clock.Since(time.Unix(0, at)).Round(time.Millisecond).String() + " old"
	}
	return ""
}

// redisFailed records a Redis read of the round, or a heartbeat, that
// failed: op names it to the Observer ("members", "sessions",
// "heartbeat"), what in the log. A read cut
// short because the worker is stopping (context.Canceled) is no Redis
// failure: it is neither counted nor logged. Rounds repeat every second
// or so while Redis is down or a key has the wrong type, so a run of
// failures is logged at warn level at its first and at each new error,
// the same error again at debug level, and its end by worksAgain.
func (h *health) redisFailed(op, what string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	h.redisOK.Store(false)
	h.obs.RedisError(op)
	h.readsMu.Lock()
	last, failing := h.reads[what]
	h.reads[what] = err.Error()
	h.readsMu.Unlock()
	if failing && last == err.Error() {
		h.log.Debug(what+" failed again", zap.Error(err))
		return
	}
	h.log.Warn(what+" failed; the same error again is logged at debug level until it works", zap.Error(err))
}

// failing is ": what: error" for each run of failures not yet ended
// (redisFailed), sorted by what; "" when none (a failed renewal records
// none).
func (h *health) failing() string {
	h.readsMu.Lock()
	defer h.readsMu.Unlock()
	var b strings.Builder
	for _, what := range slices.Sorted(maps.Keys(h.reads)) {
		b.WriteString("; " + what + ": " + h.reads[what])
	}
	if b.Len() == 0 {
		return ""
	}
	return ":" + b.String()[1:]
}

// worksAgain ends a run of failures of what (redisFailed), if one was
// logged.
func (h *health) worksAgain(what string) {
	h.readsMu.Lock()
	_, failing := h.reads[what]
	delete(h.reads, what)
	h.readsMu.Unlock()
	if failing {
		h.log.Info(what + " works again")
	}
}
