package httppoll

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// Headers sent with every request.
const (
	HeaderSession = "X-Poll-Session"
	HeaderWorker  = "X-Poll-Worker"
	HeaderToken   = "X-Poll-Token"
)

// Defaults and limits of Config.
const (
	// DefaultTimeout caps one request when the session interval is longer.
	DefaultTimeout = 10 * time.Second
	// DefaultStreamMaxLen is the approximate length of the results stream.
	DefaultStreamMaxLen = 10000
	// DefaultRecordTimeout bounds the XADD of one result.
	DefaultRecordTimeout = time.Second
	// DefaultUserAgent is the User-Agent header of every request.
	DefaultUserAgent = "pollworker"
	// MaxBodyBytes is how much of a response body is read before closing it.
	MaxBodyBytes = 64 << 10
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("httppoll: invalid config")

// StatusError is returned (wrapped) by Poll when the target answers with a
// status code of 500 or above.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
}

// Error names the status.
func (e *StatusError) Error() string {
	return fmt.Sprintf("httppoll: server error: %d %s", e.Code, http.StatusText(e.Code))
}

// Config configures a Poller.
type Config struct {
	// Client receives the results stream (XADD); any redis.Cmdable.
	// Required.
	Client redis.Cmdable
	// Keys names the results stream; the zero value uses the default
	// prefixes.
	Keys keyspace.Space
	// Worker is this worker's id, sent in X-Poll-Worker and recorded.
	// Required; must pass keyspace.ValidateID.
	Worker string
	// HTTP sends the requests. Default: a client of its own with a clone of
	// http.DefaultTransport and no Client.Timeout (each request is bounded
	// through its context instead, see Timeout).
	HTTP *http.Client
	// Timeout caps each request; the effective bound is
	// min(session interval, Timeout). Default DefaultTimeout (10s).
	Timeout time.Duration
	// StreamMaxLen is the approximate cap of the results stream (XADD
	// MAXLEN ~). Default DefaultStreamMaxLen (10000).
	StreamMaxLen int64
	// RecordTimeout bounds recording one result, which runs even when the
	// poll's context was cancelled. Default DefaultRecordTimeout (1s).
	RecordTimeout time.Duration
	// UserAgent is sent with every request; default DefaultUserAgent.
	UserAgent string
	// Logger receives recording failures; default zap.NewNop().
	Logger *zap.Logger
	// Clock timestamps and times the polls; default the real clock.
	Clock clock.PassiveClock
}

// Poller polls sessions over HTTP. It starts no goroutines of its own (the
// HTTP transport keeps idle connections, see CloseIdleConnections) and is
// safe for concurrent use.
type Poller struct {
	cfg Config
	log *zap.Logger

	recordFailing atomic.Bool // the last XADD failed
}

var _ poller.Poller = (*Poller)(nil)

// New validates cfg, fills in its defaults and returns a Poller. It does not
// touch Redis or the network.
func New(cfg Config) (*Poller, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if err := cfg.Keys.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Keys: %w", ErrConfig, err)
	}
	if err := keyspace.ValidateID(cfg.Worker); err != nil {
		return nil, fmt.Errorf("%w: Worker: %w", ErrConfig, err)
	}
	switch {
	case cfg.Timeout == 0:
		cfg.Timeout = DefaultTimeout
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: Timeout must be positive, got %v", ErrConfig, cfg.Timeout)
	}
	switch {
	case cfg.StreamMaxLen == 0:
		cfg.StreamMaxLen = DefaultStreamMaxLen
	case cfg.StreamMaxLen < 0:
		return nil, fmt.Errorf("%w: StreamMaxLen must be positive, got %d", ErrConfig, cfg.StreamMaxLen)
	}
	switch {
	case cfg.RecordTimeout == 0:
		cfg.RecordTimeout = DefaultRecordTimeout
	case cfg.RecordTimeout < 0:
		return nil, fmt.Errorf("%w: RecordTimeout must be positive, got %v", ErrConfig, cfg.RecordTimeout)
	}
	if cfg.HTTP == nil {
		// Many sessions often poll one host: keep enough idle connections
		// per host to reuse them (the default of 2 would open and close a
		// connection for nearly every poll and exhaust ephemeral ports).
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 4096
		tr.MaxIdleConnsPerHost = 1024
		cfg.HTTP = &http.Client{Transport: tr}
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Poller{cfg: cfg, log: cfg.Logger.With(zap.String("worker", cfg.Worker))}, nil
}

// Poll sends one GET to s.URL under ctx and records the result. It returns
// an error for a transport failure (including ctx being cancelled, which
// aborts the request) and for a status of 500 or above; see the package
// comment. l may be nil (no token is sent and token 0 is recorded).
func (p *Poller) Poll(ctx context.Context, s session.Session, l *lease.Lease) error {
	start := p.cfg.Clock.Now()
	status, err := p.get(ctx, s, l)
	latency := p.cfg.Clock.Since(start)
	if err == nil && status >= http.StatusInternalServerError {
		err = &StatusError{Code: status}
	}
	p.record(ctx, s, l, start, status, latency, err)
	if err != nil {
		return fmt.Errorf("poll %s: %w", s.ID, err)
	}
	return nil
}

// CloseIdleConnections closes the idle keep-alive connections of the HTTP
// client, and with them the transport's goroutines. Call it after the last
// Poll.
func (p *Poller) CloseIdleConnections() { p.cfg.HTTP.CloseIdleConnections() }

// get sends the request and drains at most MaxBodyBytes of the answer. It
// returns the status code (0 when no response arrived).
func (p *Poller) get(ctx context.Context, s session.Session, l *lease.Lease) (int, error) {
	timeout := p.cfg.Timeout
	if iv := s.Interval.D(); iv > 0 && iv < timeout {
		timeout = iv
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return 0, withoutURL(err)
	}
	req.Header.Set("User-Agent", p.cfg.UserAgent)
	req.Header.Set(HeaderSession, s.ID)
	req.Header.Set(HeaderWorker, p.cfg.Worker)
	if l != nil {
		req.Header.Set(HeaderToken, strconv.FormatInt(l.Token(), 10))
	}
	resp, err := p.cfg.HTTP.Do(req)
	if err != nil {
		return 0, withoutURL(err)
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBodyBytes))
	_ = resp.Body.Close()
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read body: %w", withoutURL(err))
	}
	return resp.StatusCode, nil
}

// record adds the result of one poll to the results stream. It runs under a
// context that keeps ctx's values but not its cancellation, bounded by
// RecordTimeout, so that the result of a poll cut short by a lost lease is
// recorded too.
func (p *Poller) record(ctx context.Context, s session.Session, l *lease.Lease, start time.Time, status int, latency time.Duration, perr error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RecordTimeout)
	defer cancel()
	var token int64
	if l != nil {
		token = l.Token()
	}
	msg := ""
	if perr != nil {
		msg = perr.Error()
	}
	err := p.cfg.Client.XAdd(ctx, &redis.XAddArgs{
		Stream: p.cfg.Keys.Results(),
		MaxLen: p.cfg.StreamMaxLen,
		Approx: true,
		Values: []any{
			"session", s.ID,
			"worker", p.cfg.Worker,
			"token", token,
			"status", status,
			"latency_ms", strconv.FormatFloat(float64(latency)/float64(time.Millisecond), 'f', 3, 64),
			"error", msg,
			"at", start.UnixMilli(),
		},
	}).Err()
	switch {
	case err != nil && !p.recordFailing.Swap(true):
		p.log.Warn("recording poll results failed; further failures are logged at debug level",
			zap.String("session", s.ID), zap.Error(err))
	case err != nil:
		p.log.Debug("recording poll result failed", zap.String("session", s.ID), zap.Error(err))
	case p.recordFailing.Swap(false):
		p.log.Info("recording poll results again")
	}
}

// withoutURL drops the URL that net/http puts into its errors: it may hold
// an API key in its query (net/http only strips the password).
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
