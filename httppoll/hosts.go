package httppoll

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// hostLimit bounds the requests in flight to one host (Config.MaxPerHost).
// A host has a semaphore only while requests to it run or wait, so the
// memory follows the hosts being polled now, not every host ever seen.
type hostLimit struct {
	max int

	mu    sync.Mutex
	hosts map[string]*hostSem
}

// hostSem is one host's semaphore and how many requests hold or wait for it.
type hostSem struct {
	slots chan struct{}
	refs  int // guarded by hostLimit.mu
}

func newHostLimit(max int) *hostLimit {
	return &hostLimit{max: max, hosts: make(map[string]*hostSem)}
}

// acquire takes a slot of host, waiting while max requests to it run, for
// at most wait and until ctx is done; it counts a wait in waits before it
// starts waiting. It returns the semaphore to give the slot back to
// (release), or the error of the wait's context if that ended first. A
// slot free at once costs no context, timer or allocation.
func (h *hostLimit) acquire(ctx context.Context, host string, wait time.Duration, waits *atomic.Uint64) (*hostSem, error) {
	h.mu.Lock()
	sem := h.hosts[host]
	if sem == nil {
		sem = &hostSem{slots: make(chan struct{}, h.max)}
		h.hosts[host] = sem
	}
	sem.refs++
	h.mu.Unlock()
	select {
	case sem.slots <- struct{}{}:
		return sem, nil
	default:
	}
	waits.Add(1)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	select {
	case sem.slots <- struct{}{}:
		return sem, nil
	case <-wctx.Done():
		h.unref(host, sem)
		return nil, wctx.Err()
	}
}

// release gives back the slot of host that acquire took from sem.
func (h *hostLimit) release(host string, sem *hostSem) {
	<-sem.slots
	h.unref(host, sem)
}

// unref forgets host's semaphore when nobody holds or waits for it.
func (h *hostLimit) unref(host string, sem *hostSem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sem.refs--; sem.refs == 0 {
		delete(h.hosts, host)
	}
}
