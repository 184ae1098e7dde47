package poller

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// worker is the poll loop of one owned session.
//
// Stopping a worker (handoff, session paused or removed, shutdown) only
// ends its loop: a poll already running finishes under its lease, which is
// still renewed, and the lease is released after the loop has exited, so a
// successor never starts while this worker's request may still be served
// downstream. Aborting cancels the running poll too; the lease term ending
// (uncertain, lost) always does.
type worker struct {
	sess  session.Session
	lease *lease.Lease
	stop  context.CancelFunc // ends the loop after the current poll
	abort context.CancelFunc // also cancels the current poll
	done  chan struct{}
	// Set by the main loop only.
	stopping  bool             // stopWorker was called; release when done
	restartAs *session.Session // start again with this definition when done (unless stopping)
}

// startWorker starts the poll loop of s under l.
func (c *Coordinator) startWorker(s session.Session, l *lease.Lease) {
	loopCtx, stop := context.WithCancel(context.Background())
	pollCtx, abort := context.WithCancel(context.Background())
	w := &worker{sess: s, lease: l, stop: stop, abort: abort, done: make(chan struct{})}
	c.workers[s.ID] = w
	go c.pollLoop(loopCtx, pollCtx, w)
}

// stopWorker ends w's loop after its current poll; the main loop releases
// the lease when the loop has exited (reapWorkers).
func (c *Coordinator) stopWorker(w *worker) {
	w.stopping = true
	w.restartAs = nil // a pending restart gives way: the lease is released
	w.stop()
}

// pollLoop polls w.sess on its interval while the lease is Held, starting at
// once. It waits while the lease is Uncertain and returns when the lease is
// Lost or Released or loopCtx is cancelled. Polls run under pollCtx and the
// lease term.
func (c *Coordinator) pollLoop(loopCtx, pollCtx context.Context, w *worker) {
	defer func() {
		close(w.done)
		c.trigger() // let the main loop reap it now
	}()
	ticker := c.cfg.Clock.NewTicker(w.sess.Interval.D())
	defer ticker.Stop()
	l := w.lease
	for {
		changed := l.Changed()
		switch l.State() {
		case lease.Lost, lease.Released:
			return
		case lease.Uncertain:
			select {
			case <-loopCtx.Done():
				return
			case <-changed:
			}
			continue
		}
		if loopCtx.Err() != nil {
			return
		}
		term := l.Context()
		if now := c.cfg.Clock.Now(); term.Err() == nil && now.Before(l.Deadline()) {
			first := l.MarkPolled()
			if gap, ok := l.HandoffGap(); ok && first {
				c.cfg.Observer.HandoffGap(gap + now.Sub(l.Acquired()))
			}
			c.pollOnce(pollCtx, term, w.sess, l)
		}
		select {
		case <-loopCtx.Done():
			return
		case <-ticker.C():
		case <-term.Done():
		}
	}
}

// pollOnce runs one poll under a context cancelled when either the worker
// stops or the lease term ends.
func (c *Coordinator) pollOnce(ctx, term context.Context, s session.Session, l *lease.Lease) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(term, cancel)
	defer stop()
	c.polls.Add(1)
	started := c.cfg.Clock.Now()
	outcome := "ok"
	defer func() {
		if r := recover(); r != nil {
			outcome = "panic"
			c.pollPanics.Add(1)
			c.log.Error("poll panicked", zap.String("session", s.ID), zap.Any("panic", r),
				zap.ByteString("stack", debug.Stack()))
		}
		c.cfg.Observer.PollDone(c.cfg.Clock.Since(started), outcome)
	}()
	if err := c.cfg.Poller.Poll(pctx, s, l); err != nil {
		outcome = "error"
		if pctx.Err() != nil {
			outcome = "cancelled"
		}
		c.pollErrors.Add(1)
		c.log.Debug("poll failed", zap.String("session", s.ID), zap.Int64("token", l.Token()), zap.Error(err))
	}
}

// stopAll stops every poll loop and waits for them until ctx is done; then
// it aborts the polls still running and waits for them a little longer. It
// returns the leases of the loops that exited, whose polls have returned,
// and forgets those workers.
func (c *Coordinator) stopAll(ctx context.Context) []*lease.Lease {
	for _, w := range c.workers {
		c.stopWorker(w)
	}
	var exited []*lease.Lease
	wait := func(ctx context.Context) {
		for id, w := range c.workers {
			select {
			case <-w.done:
				exited = append(exited, w.lease)
				delete(c.workers, id)
			case <-ctx.Done():
				return
			}
		}
	}
	wait(ctx)
	if len(c.workers) == 0 {
		return exited
	}
	for _, w := range c.workers {
		w.abort()
	}
	grace, cancel := context.WithTimeout(context.Background(), abortGrace)
	defer cancel()
	wait(grace)
	return exited
}

// abortGrace is how long a drain waits for aborted polls to return.
const abortGrace = time.Second

// release releases leases whose poll loops have exited and tells the peers,
// so that a successor takes over at once.
func (c *Coordinator) release(ctx context.Context, ls []*lease.Lease) error {
	if len(ls) == 0 {
		return nil
	}
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.Session()
	}
	if err := c.leases.Release(ctx, ls...); err != nil {
		return fmt.Errorf("release %d leases: %w", len(ls), err)
	}
	ev := nodes.Event{Type: nodes.EventRelease, Node: c.cfg.ID}
	if len(ids) <= 100 {
		ev.Sessions = ids
	}
	c.publish(ctx, ev)
	return nil
}
