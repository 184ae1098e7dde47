package election

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
)

// RunOnce runs fn only if this candidate wins the role's lease now: it tries
// once, and when elected runs fn under the lease (renewing it meanwhile; fn's
// ctx is cancelled if the lease is lost) and releases the lease after fn
// returned. ran is false, with a nil error, when another candidate holds the
// role; err is fn's error when ran is true. It suits cron-style jobs that
// every replica schedules but only one should run. Callbacks, Priority and
// successors in cfg are ignored; HealthCheck, if set, must pass first.
func RunOnce(ctx context.Context, cfg Config, fn func(ctx context.Context, token int64) error) (ran bool, err error) {
	e, err := New(cfg)
	if err != nil {
		return false, err
	}
	if !e.healthy(ctx) {
		return false, nil
	}
	res := e.mgr.Acquire(ctx, []string{e.session})[0]
	if res.Err != nil {
		return false, res.Err
	}
	l := res.Lease
	if l == nil {
		return false, nil
	}
	if l.State() != lease.Held { // acquired past its local deadline: unusable
		return false, nil
	}
	termCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.Context(), cancel)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := e.cfg.Clock.NewTicker(e.cfg.RenewInterval)
		defer ticker.Stop()
		for {
			select {
			case <-termCtx.Done():
				return
			case <-ticker.C():
				e.mgr.RenewAll(termCtx)
			}
		}
	}()
	err = fn(termCtx, l.Token())
	cancel()
	stop()
	wg.Wait()
	rctx, rcancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
	defer rcancel()
	if rerr := e.mgr.Release(rctx, l); rerr != nil {
		e.log.Warn("election release failed", zap.Error(rerr))
	}
	return true, err
}

// LeaderOnly wraps fn so that it runs only while e leads: the returned
// function returns ErrNotLeader when e is not leader, and otherwise calls fn
// with the term's fencing token and a ctx that is also cancelled when the
// term ends.
func LeaderOnly(e *Elector, fn func(ctx context.Context, token int64) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		term, token, ok := e.term()
		if !ok {
			return ErrNotLeader
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(term, cancel)
		defer stop()
		return fn(ctx, token)
	}
}
