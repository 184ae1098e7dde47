package election

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects one elector's callbacks.
type recorder struct {
	mu      sync.Mutex
	tokens  []int64
	ctxs    []context.Context
	demoted int
	leaders []string
	elected chan int64
}

func newRecorder() *recorder { return &recorder{elected: make(chan int64, 100)} }

func (r *recorder) hook(cfg *Config) {
	cfg.OnElected = func(ctx context.Context, token int64) {
		r.mu.Lock()
		r.tokens = append(r.tokens, token)
		r.ctxs = append(r.ctxs, ctx)
		r.mu.Unlock()
		r.elected <- token
		<-ctx.Done()
	}
	cfg.OnDemoted = func() {
		r.mu.Lock()
		r.demoted++
		r.mu.Unlock()
	}
	cfg.OnNewLeader = func(id string) {
		r.mu.Lock()
		r.leaders = append(r.leaders, id)
		r.mu.Unlock()
	}
}

func (r *recorder) lastCtx() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ctxs) == 0 {
		return nil
	}
	return r.ctxs[len(r.ctxs)-1]
}

func (r *recorder) demotions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.demoted
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.leaders...)
}

// start runs e until the test ends; Run's error is checked at cleanup.
func start(t *testing.T, e *Elector) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Errorf("Run of %s did not return", e.ID())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newElector builds an elector for cfg with a test logger.
func newElector(t *testing.T, cfg Config) *Elector {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	if cfg.LossQuarantine == 0 {
		cfg.LossQuarantine = -1 // each test has a fresh server
	}
	e, err := New(cfg)
	require.NoError(t, err)
	return e
}

// leaders returns the electors that lead now.
func leaders(es ...*Elector) []*Elector {
	var out []*Elector
	for _, e := range es {
		if e.IsLeader() {
			out = append(out, e)
		}
	}
	return out
}
