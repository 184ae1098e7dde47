package election

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// Elector campaigns for one role on behalf of one candidate. Run drives it;
// the other methods are safe for concurrent use.
type Elector struct {
	cfg     Config
	session string
	mgr     *lease.Manager
	roster  *roster
	log     *zap.Logger
	running atomic.Bool
	sick    atomic.Bool // last health check failed
	resignC chan resignRequest

	mu       sync.Mutex
	current  *lease.Lease    // lease of the current term, nil when not leading
	termCtx  context.Context // cancelled when the current term ends
	termDone chan struct{}   // closed when the current term ends
	holdOff  time.Time       // no campaign before this instant (after a resign)
	observed string          // last leader passed to OnNewLeader (Run goroutine only)
}

// resignRequest asks the Run loop to end the current term, preferring to as
// successor when set.
type resignRequest struct {
	to     string
	reason string
	done   chan error
}

// New validates cfg, fills in its defaults and returns an Elector. It does
// not touch Redis.
func New(cfg Config) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With(zap.String("role", cfg.Role), zap.String("candidate", cfg.ID))
	mgr, err := lease.New(lease.Config{
		Client:         cfg.Client,
		Keys:           cfg.Keys,
		Holder:         cfg.ID,
		TTL:            cfg.TTL,
		LossQuarantine: cfg.LossQuarantine,
		Clock:          cfg.Clock,
		Logger:         log,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	closed := make(chan struct{})
	close(closed)
	return &Elector{
		cfg:      cfg,
		session:  sessionOf(cfg.Role),
		mgr:      mgr,
		roster:   newRoster(cfg.Client, cfg.Keys, cfg.Role, cfg.TTL),
		log:      log,
		resignC:  make(chan resignRequest),
		termDone: closed,
	}, nil
}

// ID is this candidate's id.
func (e *Elector) ID() string { return e.cfg.ID }

// Role is the role campaigned for.
func (e *Elector) Role() string { return e.cfg.Role }

// IsLeader reports whether this candidate leads: true only while the lease
// of the current term is Held and its local deadline has not passed.
func (e *Elector) IsLeader() bool {
	_, _, ok := e.term()
	return ok
}

// Token is the fencing token of the current term, 0 when not leader.
func (e *Elector) Token() int64 {
	_, token, _ := e.term()
	return token
}

// term returns the current term's context and token while leading.
func (e *Elector) term() (context.Context, int64, bool) {
	e.mu.Lock()
	l, ctx := e.current, e.termCtx
	e.mu.Unlock()
	if l == nil || l.State() != lease.Held || !e.cfg.Clock.Now().Before(l.Deadline()) {
		return nil, 0, false
	}
	return ctx, l.Token(), true
}

// Leader reads the current leader's id from Redis; "" when nobody leads.
func (e *Elector) Leader(ctx context.Context) (string, error) {
	h, err := e.mgr.Inspect(ctx, []string{e.session})
	if err != nil {
		return "", fmt.Errorf("leader of %s: %w", e.cfg.Role, err)
	}
	if len(h) == 0 || h[0].Owner == "" {
		return "", nil
	}
	return lease.HolderOf(h[0].Owner), nil
}

// Candidates returns the live candidates of the role, highest priority first.
func (e *Elector) Candidates(ctx context.Context) ([]Candidate, error) {
	return e.roster.live(ctx)
}

// Resign ends the current term: OnElected's context is cancelled, the lease
// is released once OnElected returned, and this candidate does not campaign
// again for two RetryIntervals, so that another takes over. It returns nil
// when not leader, and after the release otherwise. It must not be called
// from the goroutine running OnElected (that goroutine must return for the
// release to happen); call it from another goroutine.
func (e *Elector) Resign(ctx context.Context) error {
	err := e.request(ctx, resignRequest{reason: "resigned"})
	if err == ErrNotLeader {
		return nil
	}
	return err
}

// TransferTo ends the current term like Resign, after recording id as the
// preferred successor for one TTL: other candidates wait two RetryIntervals
// before campaigning while id is live. It returns ErrNotLeader when not
// leader and ErrNoCandidate when id is not a live candidate.
func (e *Elector) TransferTo(ctx context.Context, id string) error {
	if err := keyspace.ValidateID(id); err != nil {
		return fmt.Errorf("transfer to %q: %w", id, err)
	}
	if id == e.cfg.ID {
		return fmt.Errorf("transfer to %s: %w: it is this candidate", id, ErrNoCandidate)
	}
	if !e.IsLeader() {
		return ErrNotLeader
	}
	ok, err := e.roster.isLive(ctx, id)
	if err != nil {
		return fmt.Errorf("transfer to %s: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("transfer to %s: %w", id, ErrNoCandidate)
	}
	return e.request(ctx, resignRequest{to: id, reason: "transferred to " + id})
}

func (e *Elector) request(ctx context.Context, req resignRequest) error {
	e.mu.Lock()
	leading, termDone := e.current != nil, e.termDone
	e.mu.Unlock()
	if !leading {
		return ErrNotLeader
	}
	req.done = make(chan error, 1)
	select {
	case e.resignC <- req:
	case <-termDone:
		return ErrNotLeader
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run campaigns until ctx is done: it acquires the role's lease when free,
// leads while it renews the lease, and campaigns again after a term ends. On
// return the lease is released (with a fresh context bounded by
// ReleaseTimeout) and this candidate's record removed. Run returns nil once
// ctx is done and every goroutine it started has returned, or ErrRunning if
// the Elector is already running.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer e.running.Store(false)
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
		defer cancel()
		if err := e.roster.leave(rctx, e.cfg.ID); err != nil {
			e.log.Warn("election leave failed", zap.Error(err))
		}
	}()
	for {
		l := e.campaign(ctx)
		if l == nil {
			return nil
		}
		e.lead(ctx, l)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// campaign tries to acquire the lease every RetryInterval until it does
// (returning the lease) or ctx is done (returning nil).
func (e *Elector) campaign(ctx context.Context) *lease.Lease {
	var deferredFor string // successor preference we already waited for
	wait := time.Duration(0)
	for {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-e.cfg.Clock.After(wait):
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		var l *lease.Lease
		l, wait = e.attempt(ctx, &deferredFor)
		if l != nil {
			return l
		}
	}
}

// attempt is one round of campaign: it registers as a live candidate, defers
// to a named successor or a hold-off, and tries to acquire. It returns the
// lease when acquired, else how long to wait before the next attempt.
// deferredFor is the successor preference already waited for once.
func (e *Elector) attempt(ctx context.Context, deferredFor *string) (*lease.Lease, time.Duration) {
	wait := e.cfg.RetryInterval
	if !e.healthy(ctx) {
		// Not live while unhealthy: no leader hands over to us.
		if err := e.roster.leave(ctx, e.cfg.ID); err != nil {
			e.log.Warn("election leave failed", zap.Error(err))
		}
		e.observe(ctx)
		return nil, wait
	}
	// Only a healthy candidate is live: a leader never hands over to
	// one that would not campaign.
	if err := e.roster.register(ctx, e.cfg.ID, e.cfg.Priority); err != nil {
		e.log.Warn("election register failed", zap.Error(err))
	}
	succ, pref, err := e.roster.preferred(ctx)
	if err != nil {
		e.log.Warn("election successor read failed", zap.Error(err))
	}
	if d, ok := e.deferral(ctx, succ, pref, deferredFor); ok {
		e.observe(ctx)
		return nil, d
	}
	res := e.mgr.Acquire(ctx, []string{e.session})[0]
	switch {
	case res.Lease != nil && res.Lease.State() != lease.Held:
		// The reply came after the local deadline: unusable; the
		// manager drops the key at its next cycle or it expires.
		e.log.Warn("election acquired too late", zap.String("reason", res.Lease.Reason()))
		return nil, wait
	case res.Lease != nil:
		if succ == e.cfg.ID {
			if err := e.roster.honoured(ctx, e.cfg.ID); err != nil {
				e.log.Warn("election clear successor failed", zap.Error(err))
			}
		}
		return res.Lease, 0
	case res.Err != nil:
		e.log.Warn("election campaign failed", zap.Error(res.Err))
		return nil, wait
	}
	if res.Remaining > 0 && res.Remaining < wait {
		wait = res.Remaining
	}
	e.observe(ctx)
	return nil, wait
}

// deferral says whether this candidate stands back this round, and how long
// to wait before the next attempt: during its own hold-off after a resign (unless it is the
// named successor), and once per preference for a live named successor.
func (e *Elector) deferral(ctx context.Context, succ, pref string, deferredFor *string) (time.Duration, bool) {
	e.mu.Lock()
	holdOff := e.holdOff
	e.mu.Unlock()
	// A named successor campaigns even right after its own resign.
	if now := e.cfg.Clock.Now(); now.Before(holdOff) && succ != e.cfg.ID {
		return min(e.cfg.RetryInterval, holdOff.Sub(now)), true
	}
	if succ == "" || succ == e.cfg.ID || pref == *deferredFor {
		return 0, false
	}
	if live, err := e.roster.isLive(ctx, succ); err != nil || !live {
		return 0, false
	}
	// Two intervals, not one: the preferred candidate may be up to one
	// RetryInterval from its next campaign.
	*deferredFor = pref
	return 2 * e.cfg.RetryInterval, true
}

// healthy runs the health check, if any.
func (e *Elector) healthy(ctx context.Context) bool {
	if e.cfg.HealthCheck == nil {
		return true
	}
	hctx, cancel := context.WithTimeout(ctx, e.cfg.RenewInterval/2)
	defer cancel()
	err := e.cfg.HealthCheck(hctx)
	// Log transitions only: a sick candidate checks every RetryInterval.
	switch wasSick := e.sick.Swap(err != nil); {
	case err != nil && !wasSick:
		e.log.Warn("election health check failed", zap.Error(err))
	case err == nil && wasSick:
		e.log.Info("election health check passes again")
	}
	return err == nil
}

// observe reads the leader and reports a change to OnNewLeader.
func (e *Elector) observe(ctx context.Context) {
	id, err := e.Leader(ctx)
	if err != nil {
		e.log.Debug("election observe failed", zap.Error(err))
		return
	}
	e.newLeader(id)
}

func (e *Elector) newLeader(id string) {
	if id == "" || id == e.observed {
		return
	}
	e.observed = id
	e.log.Info("election new leader", zap.String("leader", id))
	if e.cfg.OnNewLeader != nil {
		e.cfg.OnNewLeader(id)
	}
}

// lead runs one term on l until it is lost, given up or ctx is done.
func (e *Elector) lead(ctx context.Context, l *lease.Lease) {
	held := l.Context() // the Held term of the lease: cancelled when it leaves Held
	termCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(held, cancel)
	defer stop()
	termDone := make(chan struct{})
	e.mu.Lock()
	e.current, e.termCtx, e.termDone = l, termCtx, termDone
	e.mu.Unlock()
	e.log.Info("election elected", zap.Int64("token", l.Token()))
	e.newLeader(e.cfg.ID)

	var wg sync.WaitGroup
	if e.cfg.OnElected != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.cfg.OnElected(termCtx, l.Token())
		}()
	}

	var req *resignRequest
	reason := e.renewLoop(ctx, l, held, &req)

	// End the term: stop the work, wait for it, then release.
	cancel()
	e.mu.Lock()
	e.current, e.termDone = nil, termDone
	e.mu.Unlock()
	close(termDone)
	wg.Wait()
	rctx, rcancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
	var err error
	if req != nil {
		if req.to != "" {
			err = e.roster.prefer(rctx, req.to)
		}
		e.mu.Lock()
		e.holdOff = e.cfg.Clock.Now().Add(2 * e.cfg.RetryInterval)
		e.mu.Unlock()
	}
	if rerr := e.mgr.Release(rctx, l); rerr != nil && err == nil {
		err = rerr
	}
	rcancel()
	if err != nil {
		e.log.Warn("election release failed", zap.Error(err))
	}
	e.log.Info("election demoted", zap.Int64("token", l.Token()), zap.String("reason", reason))
	if req != nil && req.done != nil {
		req.done <- err // buffered
	}
	if e.cfg.OnDemoted != nil {
		e.cfg.OnDemoted()
	}
}

// renewLoop renews the lease every RenewInterval and returns why the term
// ends; *req is set when it ends on a resign request (from Resign,
// TransferTo, a failed health check or a higher-priority candidate).
func (e *Elector) renewLoop(ctx context.Context, l *lease.Lease, held context.Context, req **resignRequest) string {
	ticker := e.cfg.Clock.NewTicker(e.cfg.RenewInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return "stopped"
		case <-held.Done():
			return "lease " + l.State().String() + ": " + l.Reason()
		case r := <-e.resignC:
			*req = &r
			return r.reason
		case <-ticker.C():
			if !e.healthy(ctx) {
				*req = &resignRequest{reason: "health check failed"}
				return (*req).reason
			}
			rep := e.mgr.RenewAll(ctx)
			if rep.Renewed == 0 {
				continue // held.Done() tells why
			}
			if err := e.roster.register(ctx, e.cfg.ID, e.cfg.Priority); err != nil {
				e.log.Warn("election register failed", zap.Error(err))
			}
			if to := e.higherPriority(ctx); to != "" {
				*req = &resignRequest{to: to, reason: "higher priority " + to}
				return (*req).reason
			}
		}
	}
}

// higherPriority returns the best live candidate whose priority exceeds
// this one's, "" when there is none.
func (e *Elector) higherPriority(ctx context.Context) string {
	cands, err := e.roster.live(ctx)
	if err != nil {
		e.log.Warn("election candidates read failed", zap.Error(err))
		return ""
	}
	if len(cands) > 0 && cands[0].Priority > e.cfg.Priority && cands[0].ID != e.cfg.ID {
		return cands[0].ID
	}
	return ""
}
