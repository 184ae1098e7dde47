package httppoll

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/internal/failurelog"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// Headers sent with every request.
const (
	HeaderSession = "X-Poll-Session"
	HeaderWorker  = "X-Poll-Worker"
	HeaderToken   = "X-Poll-Token"
	// HeaderSlot carries, for a scheduled session, the slot the poll runs
	// for (RFC 3339, UTC): with the token, what a target dedupes on.
	HeaderSlot = "X-Poll-Slot"
	// HeaderDeadline carries the worker's wall-clock time (RFC 3339 UTC,
	// milliseconds) at which it abandons the request: its timeout
	// (RequestTimeout). The worker gives up sooner if its
	// lease is lost. A target that reads the request after this time (a
	// backlog, a stall) may refuse it: the worker has stopped waiting and
	// the session may already be someone else's.
	HeaderDeadline = "X-Poll-Deadline"
)

// DeadlineFormat is the layout of HeaderDeadline's value.
const DeadlineFormat = "2006-01-02T15:04:05.000Z07:00"

// Defaults and limits of Config.
const (
	// DefaultTimeout caps one request when the session interval is longer.
	DefaultTimeout = 10 * time.Second
	// DefaultRecordTimeout bounds the XADD of one result.
	DefaultRecordTimeout = time.Second
	// DefaultUserAgent is the User-Agent header of every request.
	DefaultUserAgent = "pollworker"
	// MaxBodyBytes is how much of a response body is read before closing it.
	MaxBodyBytes = 64 << 10
	// DefaultMaxPerHost is the default of Config.MaxPerHost.
	DefaultMaxPerHost = 64
	// DefaultIdleConnTimeout is the default of Config.IdleConnTimeout.
	DefaultIdleConnTimeout = 4 * time.Second
	// SaveTimeout bounds saving one session's State.
	SaveTimeout = 2 * time.Second
	// DefaultProfileRecheck is the default of Config.ProfileRecheck.
	DefaultProfileRecheck = 100 * time.Millisecond
	// DefaultMaxRetryAfter is the default of Config.MaxRetryAfter.
	DefaultMaxRetryAfter = 10 * time.Minute
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("httppoll: invalid config")

// StatusError is returned (wrapped) by Poll when the target answers with a
// status the session does not expect (session.Session.Expect; by default
// anything outside 200-399).
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Expect is what the session expects ("200-399" by default).
	Expect string
}

// Error names the status and what was expected.
func (e *StatusError) Error() string {
	kind := "unexpected status"
	if e.Code >= http.StatusInternalServerError {
		kind = "server error"
	}
	return fmt.Sprintf("httppoll: %s: %d %s (expect %s)", kind, e.Code, http.StatusText(e.Code), e.Expect)
}

// Config configures a Poller.
type Config struct {
	// Recorder, when set, receives the results to record: Poll hands each
	// one over without waiting for Redis, and the Recorder writes them in
	// batches. Client, StreamMaxLen and RecordTimeout are then unused.
	Recorder *results.Recorder
	// Client receives each result synchronously (one XADD per poll, to
	// keyspace.Space.Results) when Recorder is nil: simple, but a round
	// trip per poll. Required unless Recorder is set or Record is
	// RecordNone.
	Client redis.Cmdable
	// Record says which results are recorded: RecordAll (the default),
	// RecordChanges or RecordNone.
	Record results.RecordMode
	// ChangesMemory bounds the sessions whose last outcome this Poller
	// remembers for the polls without saved state (Poll), to tell whether
	// their response changed (results.Result.Changed). Default
	// DefaultChangesMemory.
	ChangesMemory int
	// RecordBody is how many bytes of each response body a result carries
	// (results.Result.Body), from 0 (the default: none) to MaxBodyBytes.
	// Each result then costs up to that much more Redis memory in the
	// results streams.
	RecordBody int
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
	// Timeout caps each request of a session without a Timeout of its own
	// (RequestTimeout). Default DefaultTimeout (10s).
	Timeout time.Duration
	// StreamMaxLen is the approximate cap of the results stream (XADD
	// MAXLEN ~), without a Recorder. Default results.DefaultStreamMaxLen.
	StreamMaxLen int64
	// RecordTimeout bounds recording one result, which runs even when the
	// poll's context was cancelled. Default DefaultRecordTimeout (1s).
	RecordTimeout time.Duration
	// UserAgent is sent with every request; default DefaultUserAgent.
	UserAgent string
	// MaxPerHost bounds the requests this Poller has in flight to one host
	// (host and port of the URL as written). Under a poller.Coordinator the
	// bound is kept in front of the Poller (PollGroup, poller.GroupLimiter):
	// a due poll of a full host waits in the scheduler for its fair turn,
	// and a worker falling behind for it reports the host. Called directly,
	// a poll waits for a slot under its context for at most half its
	// timeout, so that the request it then sends has at least the other
	// half; a wait cut short by that bound sends nothing and returns an
	// error wrapping poller.ErrNoCapacity (no result, not a failure, counted
	// in Stats.NoSlot), by the lease ending a cancellation. Default
	// DefaultMaxPerHost (64); negative means no bound.
	MaxPerHost int
	// StateRefresh is how old the saved State of a session may grow while
	// its polls change nothing an operator needs to see (see State);
	// default DefaultStateRefresh (60s).
	StateRefresh time.Duration
	// IdleConnTimeout is how long a keep-alive connection of the default
	// HTTP client stays open unused before it is closed (ignored when HTTP
	// is set). net/http reuses the most recently used idle connection
	// first, so the connections a burst opened (a start, a takeover) and
	// steady polling no longer needs go idle and close after this, while
	// the ones in use stay open. The default, DefaultIdleConnTimeout (4s),
	// is below the keep-alive timeouts of common servers (Apache httpd and
	// Node.js close after 5s), so that the worker closes an idle
	// connection before the server does and no request is sent on a
	// connection the server is closing. A session polled less often than
	// this on a host of its own dials for each poll (TLS sessions are
	// resumed). Negative means no limit.
	IdleConnTimeout time.Duration
	// ErrorBackoff is the coordinator's poller.Config.MaxErrorBackoff, so
	// that State.BackoffMS shows the backoff it applies; 0 means
	// poller.DefaultMaxErrorBackoff, negative no backoff.
	ErrorBackoff time.Duration
	// Failures, when set, remembers which sessions are failing (the status
	// page of pollworker run keeps one): it is told the outcome of every
	// poll not cut short by its lease ending.
	Failures FailureTracker
	// Profiles are the worker-side profiles sessions may name
	// (session.Session.Profile): credentials and TLS settings, read from
	// files when polls need them and again when the files change (see
	// ParseProfiles). A session whose profile is not here is not polled:
	// its polls fail with a *ProfileError without sending anything.
	Profiles map[string]Profile
	// ProfileRecheck is how often at most a profile's file is checked for
	// a change (one stat): a rotated file is used by the polls that start
	// this long after it changed. Default DefaultProfileRecheck (100ms);
	// negative checks at every poll.
	ProfileRecheck time.Duration
	// MaxRetryAfter bounds how long a target answering 429 or 503 with
	// Retry-After (seconds or an HTTP date) is left alone: the poll fails
	// with a poller.RetryAfterError and the session's next poll is not
	// sooner than that. Default DefaultMaxRetryAfter (10m); negative
	// ignores Retry-After.
	MaxRetryAfter time.Duration
	// Logger receives recording failures and the failure transitions of
	// sessions (first failure, recovery); default zap.NewNop().
	Logger *zap.Logger
	// Clock timestamps and times the polls; default the real clock.
	Clock clock.PassiveClock
}

// Poller polls sessions over HTTP. It starts no goroutines of its own (the
// HTTP transport keeps idle connections, see CloseIdleConnections) and is
// safe for concurrent use.
type Poller struct {
	cfg         Config
	log         *zap.Logger
	changes     *changes   // the last outcomes of the polls without saved state
	hosts       *hostLimit // nil without a per-host bound
	profiles    *profiles
	transitions transitionLog
	stats       stats

	recordLog failurelog.Log // synchronous XADDs (no Recorder)
	saveLog   failurelog.Log // Saves failing with a Redis error
}

// FailureTracker remembers which sessions a Poller polls are failing, for
// an operator (Config.Failures). Its methods are called concurrently.
type FailureTracker interface {
	// Update is told the state of session id after a poll (its Turn: the
	// lease's token, whether the lease has ended since; nil for a poll
	// outside a Coordinator) that its lease's end did not cut short.
	Update(id string, t *poller.Turn, st State)
	// Failures is how many polls of id under the lease of t (the same
	// token) failed in a row, and since when, as far as it remembers: what
	// a poll without saved state counts on.
	Failures(id string, t *poller.Turn) (n int, since time.Time)
}

var _ poller.Poller = (*Poller)(nil)

// New validates cfg, fills in its defaults and returns a Poller. It does not
// touch Redis or the network.
func New(cfg Config) (*Poller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	base, _ := cfg.HTTP.Transport.(*http.Transport)
	if cfg.HTTP.Transport == nil {
		base = http.DefaultTransport.(*http.Transport)
	}
	profiles, err := newProfiles(cfg.Worker, cfg.Profiles, cfg.ProfileRecheck, base, cfg.HTTP.CheckRedirect)
	if err != nil {
		return nil, err
	}
	p := &Poller{cfg: cfg, log: cfg.Logger.With(zap.String("worker", cfg.Worker)), profiles: profiles,
		transitions: transitionLog{every: DefaultTransitionLogEvery, last: map[string]time.Time{}, open: map[string]bool{}},
		recordLog:   failurelog.Log{What: "recording poll results"}, saveLog: failurelog.Log{What: "saving session state"},
		changes: newChanges(cfg.ChangesMemory)}
	if cfg.MaxPerHost > 0 {
		p.hosts = newHostLimit(cfg.MaxPerHost)
	}
	// Said at start rather than at the first poll of each session: a token
	// file not mounted yet, a variable not set, a certificate unreadable.
	for _, err := range profiles.check() {
		p.log.Warn("a profile cannot be applied now: the sessions that name it fail until it can (its files are read again when they change)", zap.Error(err))
	}
	return p, nil
}

// withDefaults checks cfg's rules and fills in its defaults; errors name
// the field.
func (cfg Config) withDefaults() (Config, error) {
	if err := cfg.validateRecording(); err != nil {
		return cfg, err
	}
	if err := keyspace.ValidateID(cfg.Worker); err != nil {
		return cfg, fmt.Errorf("%w: Worker: %w", ErrConfig, err)
	}
	for _, err := range []error{
		positiveOr(&cfg.ChangesMemory, DefaultChangesMemory, "ChangesMemory"),
		positiveOr(&cfg.Timeout, DefaultTimeout, "Timeout"),
		positiveOr(&cfg.StreamMaxLen, results.DefaultStreamMaxLen, "StreamMaxLen"),
		positiveOr(&cfg.RecordTimeout, DefaultRecordTimeout, "RecordTimeout"),
		positiveOr(&cfg.StateRefresh, DefaultStateRefresh, "StateRefresh"),
	} {
		if err != nil {
			return cfg, err
		}
	}
	cfg.HTTP = httpClient(cfg.HTTP, cfg.IdleConnTimeout)
	cfg.MaxRetryAfter = orDefault(cfg.MaxRetryAfter, DefaultMaxRetryAfter)
	cfg.MaxPerHost = orDefault(cfg.MaxPerHost, DefaultMaxPerHost)
	cfg.ErrorBackoff = orDefault(cfg.ErrorBackoff, poller.DefaultMaxErrorBackoff)
	cfg.ProfileRecheck = orDefault(cfg.ProfileRecheck, DefaultProfileRecheck)
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return cfg, nil
}

// validateRecording checks the settings of what is recorded and where.
func (cfg Config) validateRecording() error {
	if cfg.Record < results.RecordAll || cfg.Record > results.RecordNone {
		return fmt.Errorf("%w: Record must be RecordAll, RecordChanges or RecordNone, got %d", ErrConfig, int(cfg.Record))
	}
	if cfg.Client == nil && cfg.Recorder == nil && cfg.Record != results.RecordNone {
		return fmt.Errorf("%w: Client is required (or a Recorder, or Record: RecordNone)", ErrConfig)
	}
	if cfg.RecordBody < 0 || cfg.RecordBody > MaxBodyBytes {
		return fmt.Errorf("%w: RecordBody must be from 0 to %d, got %d", ErrConfig, MaxBodyBytes, cfg.RecordBody)
	}
	if err := cfg.Keys.Validate(); err != nil {
		return fmt.Errorf("%w: Keys: %w", ErrConfig, err)
	}
	return nil
}

// positiveOr sets *v to def when it is zero and refuses a negative value,
// naming field.
func positiveOr[T int | int64 | time.Duration](v *T, def T, field string) error {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		return fmt.Errorf("%w: %s must be positive, got %v", ErrConfig, field, *v)
	}
	return nil
}

// orDefault is v, or def when v is zero (a negative v keeps its meaning).
func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// httpClient is c, or when nil a client whose transport keeps enough idle
// connections per host (many sessions often poll one host: the default of
// 2 would open and close a connection for nearly every poll and exhaust
// ephemeral ports) and resumes TLS sessions; either way with
// checkRedirect unless c has its own.
func httpClient(c *http.Client, idle time.Duration) *http.Client {
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 4096
		tr.MaxIdleConnsPerHost = 1024
		switch {
		case idle == 0:
			tr.IdleConnTimeout = DefaultIdleConnTimeout
		case idle > 0:
			tr.IdleConnTimeout = idle
		default:
			tr.IdleConnTimeout = 0 // no limit
		}
		// A connection closed while idle is dialled again for a later
		// poll: resume its TLS session rather than run a full handshake.
		tr.TLSClientConfig = &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(1024)}
		c = &http.Client{Transport: tr}
	}
	if c.CheckRedirect == nil {
		cc := *c
		cc.CheckRedirect = checkRedirect
		c = &cc
	}
	return c
}

// PollGroup implements poller.GroupLimiter: s's polls count against the
// MaxPerHost bound of its URL's host (lower-cased host and port, as
// written), which a Coordinator then keeps in front of Poll. It returns ""
// without a bound or for a URL without a host.
func (p *Poller) PollGroup(s session.Session) (host string, max int) {
	if p.hosts == nil {
		return "", 0
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.Host == "" {
		return "", 0
	}
	return strings.TrimSuffix(strings.ToLower(u.Host), ":"), p.cfg.MaxPerHost
}

// Poll sends the request of t's session to its URL under ctx, with t's
// fencing token (0 without a lease: poller.NewTurn), and records the
// result. It returns an error for a transport failure (including ctx
// being cancelled, which aborts the request) and for a status the session
// does not expect; see the package comment.
//
// With saved state (t.State, under poller.Config.Stateful) the request is
// conditional on the saved ETag and Last-Modified, and the next State is
// saved through it when something an operator needs to see changed, or
// the saved one is older than Config.StateRefresh (see State); a failed
// save is logged and counted (Stats), never retried, and does not fail the
// poll. Without it there is no conditional request, and the consecutive
// failures told to Config.Failures count only those under t's lease that
// it remembers.
func (p *Poller) Poll(ctx context.Context, t *poller.Turn) error {
	if st := t.State(); st != nil {
		return p.poll(ctx, t.Session(), t, st)
	}
	return p.poll(ctx, t.Session(), t, nil)
}

// stateSlot is where a poll reads and saves its session's state:
// *poller.SessionState, or a fake in tests. Decoded decodes each saved
// record once (poller.SessionState.Decoded): reading the state at every
// poll took about 5 % of a poll's CPU at 1k sessions.
type stateSlot interface {
	Decoded(decode func(data []byte) (any, error)) (state.Record, any, error)
	Save(ctx context.Context, data []byte) error
}

// decodeSaved is the decode function of a stateSlot: a State, or nil for
// a session never saved.
func decodeSaved(data []byte) (any, error) {
	if len(data) == 0 {
		return nil, nil
	}
	st, err := DecodeState(data)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// poll runs one poll of s, the session of t (nil in tests: no lease);
// st is nil without saved state.
func (p *Poller) poll(ctx context.Context, s session.Session, t *poller.Turn, st stateSlot) error {
	prev, hadPrev := p.previous(s, t, st)
	start := p.cfg.Clock.Now()
	resp, err := p.get(ctx, s, t, prev, st != nil)
	if errors.Is(err, poller.ErrNoCapacity) {
		// Not sent: no result, no failure, no state (MaxPerHost).
		p.stats.noSlot.Add(1)
		return fmt.Errorf("poll %s: %w", s.ID, err)
	}
	r := polled{s: s, t: t, st: st, prev: prev, hadPrev: hadPrev, resp: resp, start: start, latency: p.cfg.Clock.Since(start)}
	if err == nil {
		err = p.statusError(s, resp, st != nil)
	}
	r.err, r.class = err, classify(err)
	if err != nil && ctx.Err() != nil {
		r.class = classCanceled // cut short by the lease ending: neither a failure nor a success
	}
	p.stats.polls[outcomeOf(resp.status, r.class)].Add(1)
	res := r.result(p.cfg.Worker)
	if r.class == classCanceled { // no observation of the target: no change
		p.record(ctx, res)
	} else {
		p.observe(ctx, r, res)
	}
	if err != nil {
		return fmt.Errorf("poll %s: %w", s.ID, err)
	}
	if resp.retryAfter > 0 && r.class != classCanceled {
		// An expected 429 or 503 that asked to be left alone: no failure,
		// but the next poll waits as asked.
		p.stats.throttled.Add(1)
		return &poller.RetryAfterError{Delay: resp.retryAfter}
	}
	return nil
}

// polled is one poll that got an answer or an error: what it polled,
// under which lease and state, and what came back.
type polled struct {
	s       session.Session
	t       *poller.Turn // nil in tests
	st      stateSlot    // nil without saved state
	prev    State        // the state before the poll (Poller.previous)
	hadPrev bool         // prev is a saved state
	resp    response
	err     error
	class   errClass
	start   time.Time
	latency time.Duration
}

// result is the poll's result as recorded, before its change is judged.
func (r polled) result(worker string) results.Result {
	var token int64
	if r.t != nil {
		token = r.t.Token()
	}
	res := results.Result{Session: r.s.ID, Worker: worker, Token: token, Status: r.resp.status, Latency: r.latency, At: r.start,
		Body: r.resp.body}
	if r.err != nil {
		res.Error = r.err.Error()
	}
	return res
}

// statusError is the error of an answer whose status s does not expect
// (a RetryAfterError when the target asked to wait), nil for an expected
// one.
func (p *Poller) statusError(s session.Session, resp response, conditional bool) error {
	if expected(s, resp.status, conditional) {
		return nil
	}
	err := error(&StatusError{Code: resp.status, Expect: s.ExpectOrDefault()})
	if resp.retryAfter > 0 {
		p.stats.throttled.Add(1)
		err = &poller.RetryAfterError{Delay: resp.retryAfter, Err: err}
	}
	return err
}

// observe follows a poll that observed the target: its next state, its
// change, the result recorded, the failures table and the saved state.
func (p *Poller) observe(ctx context.Context, r polled, res results.Result) {
	next, outcomeChanged := p.next(r.prev, r.hadPrev, r.s, r.resp, r.class, r.start, r.latency)
	if r.err != nil {
		next.Message = cutMessage(r.err.Error())
	}
	if r.hadPrev && outcomeChanged { // hadPrev: a saved state, so st is set
		p.stats.changes.Add(1)
	}
	p.transitions.log(p.log, r.s.ID, r.prev, next, p.cfg.Clock.Now())
	res.BodySHA256 = contentHash(next, r.resp)
	if r.st != nil { // against the saved state, whoever saved it
		res.Changed = !r.hadPrev || outcomeChanged
	} else { // against this Poller's memory
		res.Changed = p.changes.changed(r.s.ID, changeOf(next))
	}
	p.record(ctx, res)
	if p.cfg.Failures != nil {
		p.cfg.Failures.Update(r.s.ID, r.t, next)
	}
	if r.st != nil && ctx.Err() == nil && needsSave(r.prev, next, r.hadPrev, p.cfg.StateRefresh) {
		p.save(ctx, r.st, r.s.ID, next)
	}
}

// expected reports whether status counts as success for s. A 304 to a
// conditional request stands for the 200 its validators came from.
func expected(s session.Session, status int, conditional bool) bool {
	if status == http.StatusNotModified && conditional && !s.Expected(status) {
		return s.Expected(http.StatusOK)
	}
	return s.Expected(status)
}

// previous is the state of s before this poll: the saved one if st has a
// readable one for s's URL, else (without saved state) only the failures
// under t's lease that this Poller remembers.
func (p *Poller) previous(s session.Session, t *poller.Turn, st stateSlot) (State, bool) {
	if st == nil {
		if p.cfg.Failures == nil {
			return State{}, false
		}
		n, since := p.cfg.Failures.Failures(s.ID, t)
		return State{Failures: n, FailingSince: since}, false
	}
	rec, v, err := st.Decoded(decodeSaved)
	if err != nil {
		p.log.Info("saved state of the session unreadable; starting it afresh",
			zap.String("session", s.ID), zap.Int64("state_token", rec.Token), zap.Error(err))
		return State{}, false
	}
	prev, ok := v.(State)
	if !ok {
		return State{}, false // never saved
	}
	if !hasURLHash(prev.URLHash, s.URL) {
		// The session now polls another URL (sessions add --replace):
		// the old URL's validators and body mean nothing there.
		return State{}, false
	}
	return prev, true
}

// next is the state after a poll that started at start, took latency and
// got resp (failing with class), following prev, and whether the outcome
// changed from prev's (changed).
func (p *Poller) next(prev State, hadPrev bool, s session.Session, resp response, class errClass,
	start time.Time, latency time.Duration) (next State, outcomeChanged bool) {
	next = prev
	next.Version, next.Worker, next.Polled = StateVersion, p.cfg.Worker, start.UTC()
	if !hadPrev { // else previous checked that prev.URLHash is s.URL's
		next.URLHash = urlHash(s.URL)
	}
	next.Status, next.Error, next.Message = resp.status, class.String(), ""
	next.LatencyMS = float64(latency.Microseconds()) / 1000
	next.keepContent(resp)
	next.count(class == classOK)
	next.BackoffMS = poller.ErrorBackoff(next.Failures, s.Interval.D(), p.cfg.ErrorBackoff).Milliseconds()
	outcomeChanged = changed(prev, next)
	if !hadPrev || outcomeChanged {
		next.Changed = next.Polled
	}
	return next, outcomeChanged
}

// keepContent takes the validators and the body hash of a successful
// answer read whole (2xx, or a 304 that may repeat the validators;
// otherwise the saved ones stay valid). A 2xx whose body could not be read
// (no bodyHash: Poller.get) is no content.
func (st *State) keepContent(resp response) {
	success := resp.status >= 200 && resp.status < 300 && resp.bodyHash != ""
	notModified := resp.status == http.StatusNotModified
	if success || (notModified && resp.etag != "") {
		st.ETag = resp.etag
	}
	if success || (notModified && resp.lastModified != "") {
		st.LastModified = resp.lastModified
	}
	if success && resp.bodyHash != "" {
		st.BodySHA256 = resp.bodyHash
	}
}

// count records a success (failures reset) or one more failure in a row,
// at st.Polled.
func (st *State) count(ok bool) {
	if ok {
		st.LastSuccess, st.Failures, st.FailingSince = st.Polled, 0, time.Time{}
		return
	}
	if st.Failures == 0 {
		st.FailingSince = st.Polled
	}
	st.Failures++
}

// changed reports whether a poll's outcome differs from the saved one in
// what State.Changed and results.Result.Changed track: the status, the
// error class, the ETag or the body (changeOf).
func changed(prev, next State) bool { return changeOf(prev) != changeOf(next) }

// changeOf is what a change of a session's response is judged on. A 304
// says the content is the 200 the validators came from, so 200 and 304
// are the same outcome.
func changeOf(st State) outcome {
	status := st.Status
	if status == http.StatusNotModified {
		status = http.StatusOK
	}
	return outcome{status: status, class: st.Error, etag: st.ETag, body: st.BodySHA256}
}

// contentHash is results.Result.BodySHA256 of a poll that got resp and
// left the session in st: the hash of the content for a 2xx read whole or
// a 304, else "".
func contentHash(st State, resp response) string {
	if resp.status >= 200 && resp.status < 300 && resp.bodyHash != "" || resp.status == http.StatusNotModified {
		return st.BodySHA256
	}
	return ""
}

// save saves next as s's state through st, within SaveTimeout, and logs
// and counts a failure.
func (p *Poller) save(ctx context.Context, st stateSlot, id string, next State) {
	ctx, cancel := context.WithTimeout(ctx, SaveTimeout)
	defer cancel()
	data := next.encode()
	err := st.Save(ctx, data)
	switch {
	case err == nil:
		p.stats.stateSaves.Add(1)
		p.saveLog.Succeeded(p.log)
	case errors.Is(err, state.ErrStale):
		p.stats.stateStale.Add(1)
		p.log.Info("session state not saved: this worker no longer holds the lease, or a newer holder saved",
			zap.String("session", id), zap.Error(err))
	case errors.Is(err, state.ErrTooLarge):
		p.stats.stateTooLarge.Add(1)
		p.log.Error("session state not saved: too large", zap.String("session", id),
			zap.Int("bytes", len(data)), zap.Error(err))
	default:
		p.stats.stateFailed.Add(1)
		p.saveLog.Failed(p.log, zap.String("session", id), zap.Error(err))
	}
}

// CloseIdleConnections closes the idle keep-alive connections of the HTTP
// clients (the TLS profiles' too), and with them the transports'
// goroutines. Call it after the last Poll.
func (p *Poller) CloseIdleConnections() {
	p.cfg.HTTP.CloseIdleConnections()
	p.profiles.closeIdle()
}

// Profiles returns the names of the profiles this Poller has
// (Config.Profiles), sorted: what a worker announces.
func (p *Poller) Profiles() []string { return p.profiles.list() }

// response is what a poll kept of the answer.
type response struct {
	status             int           // 0 when no response arrived
	etag, lastModified string        // validators, "" if absent or too long
	bodyHash           string        // hex SHA-256 of a 2xx body read
	body               string        // its first Config.RecordBody bytes
	retryAfter         time.Duration // of a 429 or 503, bounded by MaxRetryAfter; 0 if none
}

// RequestTimeout is how long a poll of s waits for its response, a slot
// of its host included: s.Timeout, or def (Config.Timeout) when s has
// none, and never longer than s.Interval.
func RequestTimeout(s session.Session, def time.Duration) time.Duration {
	timeout := def
	if t := s.Timeout.D(); t > 0 {
		timeout = t
	}
	if iv := s.Interval.D(); iv > 0 && iv < timeout {
		timeout = iv
	}
	return timeout
}

// get sends the request, conditional on prev's validators when
// conditional, and drains at most MaxBodyBytes of the answer, hashing it
// when conditional. The wait for a slot of its host and the request
// together are bounded by RequestTimeout, the wait by half of it.
func (p *Poller) get(ctx context.Context, s session.Session, t *poller.Turn, prev State, conditional bool) (response, error) {
	timeout := RequestTimeout(s, p.cfg.Timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if s.Profile != "" {
		ctx = withProfile(ctx, s.Profile) // checkRedirect keeps its credentials on its host
	}
	req, client, err := p.request(ctx, s, t, prev, conditional)
	if err != nil {
		return response{}, err
	}
	if p.hosts != nil {
		host := strings.ToLower(req.URL.Host)
		sem, err := p.hostSlot(ctx, host, timeout)
		if err != nil {
			return response{}, err
		}
		defer p.hosts.release(host, sem)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, withoutURL(err)
	}
	traceResponse(ctx, req.Method, resp.StatusCode)
	out := response{status: resp.StatusCode,
		etag:         bounded(resp.Header.Get("ETag"), MaxETagBytes),
		lastModified: bounded(resp.Header.Get("Last-Modified"), MaxLastModifiedBytes)}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		out.retryAfter = retryAfter(resp.Header.Get("Retry-After"), p.cfg.Clock.Now(), p.cfg.MaxRetryAfter)
	}
	out.body, out.bodyHash, err = p.readBody(resp)
	if err != nil {
		// An answer cut short is no content: its validators and the hash
		// of its part would make the next 304 stand for what was never
		// read (State.keepContent).
		out.etag, out.lastModified, out.bodyHash = "", "", ""
		return out, fmt.Errorf("read body: %w", withoutURL(err))
	}
	return out, nil
}

// request builds s's request and picks the client that sends it (its
// profile's, if it has one): the session's method, body and headers, the
// profile's credentials, then the fencing headers (last: nothing overrides
// them), the slot, the deadline of ctx, the trace and the validators of
// prev when conditional.
func (p *Poller) request(ctx context.Context, s session.Session, t *poller.Turn, prev State, conditional bool) (*http.Request, *http.Client, error) {
	var body io.Reader
	if s.Body != "" {
		body = strings.NewReader(s.Body)
	}
	req, err := http.NewRequestWithContext(ctx, s.MethodOrGet(), s.URL, body)
	if err != nil {
		return nil, nil, withoutURL(err)
	}
	req.Header["User-Agent"] = []string{p.cfg.UserAgent}
	for name, v := range s.Headers {
		req.Header.Set(name, v)
	}
	client := p.cfg.HTTP
	if s.Profile != "" {
		c, err := p.profiles.apply(s.Profile, req)
		if err != nil {
			return nil, nil, err // nothing sent without its credentials
		}
		if c != nil {
			client = c
		}
	}
	// The fencing headers' names are canonical (TestHeaderNamesAreCanonical)
	// and their values share one allocation, sliced to capacity 1 so that
	// nothing appended to one header reaches the next.
	fixed := make([]string, 5)
	fixed[0], fixed[1] = s.ID, p.cfg.Worker
	req.Header[HeaderSession] = fixed[0:1:1]
	req.Header[HeaderWorker] = fixed[1:2:2]
	if t != nil && t.Token() != 0 { // 0: a poll without a lease (poller.NewTurn)
		fixed[2] = strconv.FormatInt(t.Token(), 10)
		req.Header[HeaderToken] = fixed[2:3:3]
	}
	if slot, ok := poller.SlotOf(ctx); ok {
		fixed[3] = slot.UTC().Format(time.RFC3339)
		req.Header[HeaderSlot] = fixed[3:4:4]
	}
	if deadline, ok := ctx.Deadline(); ok {
		fixed[4] = deadline.UTC().Format(DeadlineFormat)
		req.Header[HeaderDeadline] = fixed[4:5:5]
	}
	traceRequest(ctx, req.Header)
	if conditional && prev.ETag != "" {
		req.Header.Set("If-None-Match", prev.ETag)
	}
	if conditional && prev.LastModified != "" {
		req.Header.Set("If-Modified-Since", prev.LastModified)
	}
	return req, client, nil
}

// hostSlot waits for a slot of req's host (MaxPerHost) for at most half
// the timeout, so that a request sent has at least the other half: a slot
// taken with a few milliseconds left would send a request doomed to be
// abandoned, which the target would still serve. Not getting one within
// that bound is ErrNoCapacity, no failure of the target.
func (p *Poller) hostSlot(ctx context.Context, host string, timeout time.Duration) (*hostSem, error) {
	sem, err := p.hosts.acquire(ctx, host, timeout/2, &p.stats.hostWaits)
	if err != nil {
		if ctx.Err() == nil {
			err = poller.ErrNoCapacity // the wait's own bound, not the lease
		}
		return nil, fmt.Errorf("no slot of the host within %v (%d requests in flight): %w", timeout/2, p.cfg.MaxPerHost, err)
	}
	return sem, nil
}

// emptySHA256 is the hex SHA-256 of an empty body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// readBody reads at most MaxBodyBytes of resp's body and closes it. It
// returns the first Config.RecordBody bytes, and the hex SHA-256 of what
// it read when the status is 2xx (only a 2xx body is content:
// State.BodySHA256).
func (p *Poller) readBody(resp *http.Response) (head, sum string, err error) {
	defer func() { _ = resp.Body.Close() }()
	is2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	if resp.ContentLength == 0 {
		// Known empty (a 204, say): the hash of nothing, without hashing.
		if is2xx {
			sum = emptySHA256
		}
		return "", sum, nil
	}
	var w io.Writer = io.Discard
	var h hash.Hash
	if is2xx {
		h = sha256.New()
		w = h
	}
	var kept *headBuffer
	if p.cfg.RecordBody > 0 {
		kept = &headBuffer{max: p.cfg.RecordBody}
		w = io.MultiWriter(w, kept)
	}
	// A pooled buffer: io.Copy into a hash would allocate 32 KiB per poll.
	buf := copyBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(w, io.LimitReader(resp.Body, MaxBodyBytes), *buf)
	copyBufs.Put(buf)
	if h != nil {
		sum = hex.EncodeToString(h.Sum(nil))
	}
	if kept != nil {
		head = string(kept.b)
	}
	return head, sum, err
}

// headBuffer keeps the first max bytes written to it and takes the rest
// without keeping it.
type headBuffer struct {
	b   []byte
	max int
}

func (hb *headBuffer) Write(p []byte) (int, error) {
	if room := hb.max - len(hb.b); room > 0 {
		hb.b = append(hb.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// copyBufs are the buffers that response bodies are hashed through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

// bounded is v, or "" when it is longer than max bytes.
func bounded(v string, max int) string {
	if len(v) > max {
		return ""
	}
	return v
}

// record hands res to the Recorder, or writes it at once without one, as
// the record mode says: RecordChanges records only a result that says the
// response changed. A synchronous write runs under a context that
// keeps ctx's values but not its cancellation, bounded by RecordTimeout, so
// that the result of a poll cut short by a lost lease is recorded too.
func (p *Poller) record(ctx context.Context, res results.Result) {
	switch {
	case p.cfg.Record == results.RecordNone:
		return
	case p.cfg.Record == results.RecordChanges && !res.Changed:
		if p.cfg.Recorder != nil {
			p.cfg.Recorder.Unchanged()
		}
		return
	case p.cfg.Recorder != nil:
		p.cfg.Recorder.Add(res)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RecordTimeout)
	defer cancel()
	_, err := results.Write(ctx, p.cfg.Client, p.cfg.Keys, false, p.cfg.StreamMaxLen, []results.Result{res})
	if err != nil {
		p.recordLog.Failed(p.log, zap.String("session", res.Session), zap.Error(err))
		return
	}
	p.recordLog.Succeeded(p.log)
}

// withoutURL drops the URL that net/http puts into its errors: it may hold
// an API key in its query (net/http only strips the password). A
// redirect's Location that does not parse is quoted whole by net/http
// inside the error, so that error is replaced by one that does not quote
// it.
func withoutURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	if strings.HasPrefix(ue.Err.Error(), "failed to parse Location header") {
		return fmt.Errorf("%s: the Location header of a redirect is not a URL", ue.Op)
	}
	return fmt.Errorf("%s: %w", ue.Op, ue.Err)
}

// traceRequest sends the poll's span, when the poll is traced
// (poller.Config.TracerProvider), as the W3C traceparent, so the target's
// own spans join the poll. Untraced, it is one context lookup
// (BenchmarkTracingOff measures it against a poll).
func traceRequest(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// traceResponse sets the response's status and the request's method on
// the poll's span, when the poll is traced.
func traceResponse(ctx context.Context, method string, status int) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("http.response.status_code", status),
			attribute.String("http.request.method", method))
	}
}
