package main

import (
	"context"
	"io"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// healthHandler serves the probes of the run command:
//
//	GET /healthz  200 while the process runs (liveness)
//	GET /readyz   200 while ready() is true, else 503 (readiness); the body
//	              says so, and why, when behind() is not empty (a worker
//	              behind stays ready: see poller.Coordinator.Ready)
//	GET /metrics  Prometheus metrics, when metrics is not nil
//	GET /         the status page, when page is not nil
//	GET /debug/pprof/  Go's runtime profiles (net/http/pprof), when profiles
//	              is set (--pprof: off by default, as a profile shows the
//	              process's internals to whoever reaches the port)
//
// behind may be nil.
func healthHandler(notReady func() string, behind func() string, metrics, page http.Handler, profiles bool) http.Handler {
	mux := http.NewServeMux()
	if profiles {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	if page != nil {
		mux.Handle("GET /", page)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if why := notReady(); why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+why+"\n")
			return
		}
		if why := ""; behind != nil {
			if why = behind(); why != "" {
				_, _ = io.WriteString(w, behindText(why))
				return
			}
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// behindText is the body of /readyz for a ready worker that is behind
// for the reason why (poller.PollStats.Overload).
func behindText(why string) string {
	return "ready, but behind: this worker cannot keep up with its share: " + why + " (pollworker_behind)\n"
}

// Timing of readiness's PING.
const (
	// readyPingEvery is how long one PING result is reused: however often
	// probes come (kubelet, load balancers, the status page), a worker
	// sends at most one PING a second for them.
	readyPingEvery = time.Second
	// readyPingTimeout bounds one PING, below kubelet's default probe
	// timeout (1s), so that a probe of a worker whose Redis hangs still
	// gets a 503 rather than a probe timeout.
	readyPingTimeout = 500 * time.Millisecond
)

// readiness is the run command's readiness: the coordinator's Ready (a
// fresh heartbeat, and Redis answered its last request) and a PING of
// Redis at most readyPingEvery old. The coordinator alone notices that
// Redis stopped only at its next heartbeat or renewal (up to an interval
// later); the PING makes /readyz follow Redis within about a second. Safe
// for concurrent use: concurrent callers share one PING.
type readiness struct {
	coordinator func() string // why the coordinator is not ready, "" when it is
	ping        func(context.Context) error
	now         func() time.Time // default time.Now

	mu   sync.Mutex
	at   time.Time // when the last PING was sent; zero before the first
	last error     // its result
}

// Ready reports whether the coordinator is ready and Redis answered the
// latest PING.
func (r *readiness) Ready() bool { return r.NotReady() == "" }

// NotReady says why Ready is false, "" when it is true.
func (r *readiness) NotReady() string {
	if why := r.coordinator(); why != "" {
		return why
	}
	if err := r.redisErr(); err != nil {
		return "Redis does not answer PING: " + err.Error()
	}
	return ""
}

// redisErr returns the result of a PING sent at most readyPingEvery ago,
// sending one if needed.
func (r *readiness) redisErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	if !r.at.IsZero() && now.Sub(r.at) < readyPingEvery {
		return r.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyPingTimeout)
	defer cancel()
	r.at, r.last = now, r.ping(ctx)
	return r.last
}

func (r *readiness) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}
