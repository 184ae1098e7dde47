package demo

import (
	"context"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/pollworker/pollworker/httppoll"
)

// target is an HTTP server that stands for a polled system. It answers
// each poll after a few milliseconds of "work" and, as a downstream system
// should, checks the fencing token: a poll whose token is lower than the
// highest seen for its session comes from a stale poller and is rejected
// with 409 Conflict.
type target struct {
	url  string
	srv  *http.Server
	done chan struct{}

	mu       sync.Mutex
	maxToken map[string]int64 // guarded by mu
	requests int              // guarded by mu
	stale    int              // guarded by mu
}

// startTarget serves a target on a free loopback port.
func startTarget() (*target, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &target{url: "http://" + ln.Addr().String(), done: make(chan struct{}), maxToken: map[string]int64{}}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(t.done)
		_ = t.srv.Serve(ln) // closes ln; ErrServerClosed after close
	}()
	return t, nil
}

// ServeHTTP answers one poll.
func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(httppoll.HeaderSession)
	token, _ := strconv.ParseInt(r.Header.Get(httppoll.HeaderToken), 10, 64)
	t.mu.Lock()
	t.requests++
	if token < t.maxToken[id] {
		t.stale++
		t.mu.Unlock()
		http.Error(w, "stale fencing token", http.StatusConflict)
		return
	}
	t.maxToken[id] = token
	t.mu.Unlock()

	work := time.NewTimer(workTime(id))
	defer work.Stop()
	select {
	case <-r.Context().Done():
		return
	case <-work.C:
	}
	_, _ = io.WriteString(w, "ok\n")
}

// workTime is 2-11ms, fixed per session.
func workTime(id string) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return time.Duration(2+h.Sum32()%10) * time.Millisecond
}

// counts returns the number of requests and of stale ones rejected.
func (t *target) counts() (requests, stale int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests, t.stale
}

// close stops the server, waiting for running polls up to ctx.
func (t *target) close(ctx context.Context) {
	if err := t.srv.Shutdown(ctx); err != nil {
		_ = t.srv.Close()
	}
	<-t.done
}
