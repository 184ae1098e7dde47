package poller

import (
	"context"
	"fmt"
	"runtime/debug"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// worker is the poll loop of one owned session.
type worker struct {
	sess   session.Session
	lease  *lease.Lease
	cancel context.CancelFunc
	done   chan struct{}
}

// startWorker starts the poll loop of s under l.
func (c *Coordinator) startWorker(s session.Session, l *lease.Lease) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{sess: s, lease: l, cancel: cancel, done: make(chan struct{})}
	c.workers[s.ID] = w
	go c.pollLoop(ctx, w)
}

// pollLoop polls w.sess on its interval while the lease is Held, starting at
// once. It waits while the lease is Uncertain and returns when the lease is
// Lost or Released or ctx is cancelled.
func (c *Coordinator) pollLoop(ctx context.Context, w *worker) {
	defer close(w.done)
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
			case <-ctx.Done():
				return
			case <-changed:
			}
			continue
		}
		term := l.Context()
		if term.Err() == nil && c.cfg.Clock.Now().Before(l.Deadline()) {
			c.pollOnce(ctx, term, w.sess, l)
		}
		select {
		case <-ctx.Done():
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

// stopWorkers cancels the poll loops of ids and waits for them until ctx is
// done. It returns the leases of the loops that have exited (and forgets
// those workers).
func (c *Coordinator) stopWorkers(ctx context.Context, ids []string) []*lease.Lease {
	for _, id := range ids {
		if w, ok := c.workers[id]; ok {
			w.cancel()
		}
	}
	var stopped []*lease.Lease
	for _, id := range ids {
		w, ok := c.workers[id]
		if !ok {
			continue
		}
		select {
		case <-w.done:
			stopped = append(stopped, w.lease)
			delete(c.workers, id)
		case <-ctx.Done():
		}
	}
	return stopped
}

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
