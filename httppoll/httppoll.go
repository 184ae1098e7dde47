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
	// DefaultStreamMaxLen is the approximate number of entries kept in the
	// results streams, all together: about 6 MB of Redis memory (~60 bytes
	// an entry), 100 s of results at 1,000 polls/s.
	DefaultStreamMaxLen = 100_000
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
	// Recorder, when set, receives the results to record: Poll hands each
	// one over without waiting for Redis, and the Recorder writes them in
	// batches. Client, StreamMaxLen and RecordTimeout are then unused.
	Recorder *Recorder
	// Client receives each result synchronously (one XADD per poll, to
	// keyspace.Space.Results) when Recorder is nil: simple, but a round
	// trip per poll. Required unless Recorder is set or Record is
	// RecordNone.
	Client redis.Cmdable
	// Record says which results are recorded: RecordAll (the default),
	// RecordChanges or RecordNone.
	Record RecordMode
	// ChangesMemory bounds the sessions whose last outcome RecordChanges
	// remembers (see RecordChanges). Default DefaultChangesMemory.
	ChangesMemory int
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
	// MAXLEN ~), without a Recorder. Default DefaultStreamMaxLen.
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
	cfg     Config
	log     *zap.Logger
	changes *changes // RecordChanges only

	recordFailing atomic.Bool // the last synchronous XADD failed
}

var _ poller.Poller = (*Poller)(nil)

// New validates cfg, fills in its defaults and returns a Poller. It does not
// touch Redis or the network.
func New(cfg Config) (*Poller, error) {
	if cfg.Record < RecordAll || cfg.Record > RecordNone {
		return nil, fmt.Errorf("%w: Record must be RecordAll, RecordChanges or RecordNone, got %d", ErrConfig, int(cfg.Record))
	}
	if cfg.Client == nil && cfg.Recorder == nil && cfg.Record != RecordNone {
		return nil, fmt.Errorf("%w: Client is required (or a Recorder, or Record: RecordNone)", ErrConfig)
	}
	switch {
	case cfg.ChangesMemory == 0:
		cfg.ChangesMemory = DefaultChangesMemory
	case cfg.ChangesMemory < 0:
		return nil, fmt.Errorf("%w: ChangesMemory must be positive, got %d", ErrConfig, cfg.ChangesMemory)
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
	p := &Poller{cfg: cfg, log: cfg.Logger.With(zap.String("worker", cfg.Worker))}
	if cfg.Record == RecordChanges {
		p.changes = newChanges(cfg.ChangesMemory)
	}
	return p, nil
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
	var token int64
	if l != nil {
		token = l.Token()
	}
	res := Result{Session: s.ID, Worker: p.cfg.Worker, Token: token, Status: status, Latency: latency, At: start}
	if err != nil {
		res.Error = err.Error()
	}
	p.record(ctx, res, classify(err))
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

// record hands res to the Recorder, or writes it at once without one, as
// the record mode says. A synchronous write runs under a context that
// keeps ctx's values but not its cancellation, bounded by RecordTimeout, so
// that the result of a poll cut short by a lost lease is recorded too.
func (p *Poller) record(ctx context.Context, res Result, class errClass) {
	switch {
	case p.cfg.Record == RecordNone:
		return
	case p.changes != nil && !p.changes.changed(res.Session, outcome{token: res.Token, status: res.Status, class: class}):
		if p.cfg.Recorder != nil {
			p.cfg.Recorder.unchanged.Add(1)
		}
		return
	case p.cfg.Recorder != nil:
		p.cfg.Recorder.Add(res)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RecordTimeout)
	defer cancel()
	_, err := writeResults(ctx, p.cfg.Client, p.cfg.Keys, false, p.cfg.StreamMaxLen, []Result{res})
	switch {
	case err != nil && !p.recordFailing.Swap(true):
		p.log.Warn("recording poll results failed; further failures are logged at debug level",
			zap.String("session", res.Session), zap.Error(err))
	case err != nil:
		p.log.Debug("recording poll result failed", zap.String("session", res.Session), zap.Error(err))
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
