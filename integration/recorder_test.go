package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// pollHold is how long the recorder keeps each request open: the poll's
// duration downstream, so that two pollers at once show as overlapping
// intervals rather than as two instants.
const pollHold = 30 * time.Millisecond

// fenceLookupTimeout bounds the read of the fencing record and the lease
// per poll; the read is skipped (FenceAtStart 0) when Redis is paused or
// down.
const fenceLookupTimeout = 50 * time.Millisecond

// recorder is the downstream of the chaos tests: it records every poll as a
// Poll (arrival, return, token, and the fencing counter in Redis at arrival)
// for Check, and answers 204 to everything.
type recorder struct {
	URL   string
	fence *redis.Client // direct to Redis, never through a fault proxy
	keys  keyspace.Space
	hold  time.Duration
	// keepServing makes the handler finish its hold even when the poller
	// drops the request, as a downstream that does not watch for client
	// disconnects would.
	keepServing bool
	// etags makes every answer carry a new ETag, so that a poller that
	// saves its state when the answer changes (httppoll) saves at every
	// poll: the chaos suite's state check then sees every poll's save.
	etags atomic.Bool
	etag  atomic.Int64

	mu       sync.Mutex
	polls    []Poll
	bad      int
	inFlight int
}

// lastToken is the greatest token session s was polled with so far (0 if
// none).
func (rec *recorder) lastToken(s string) int64 {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var last int64
	for _, p := range rec.polls {
		if p.Session == s {
			last = max(last, p.Token)
		}
	}
	return last
}

// serving is the number of requests being served now.
func (rec *recorder) serving() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.inFlight
}

// quickClient is a client that honours context deadlines (go-redis ignores
// them by default and waits for its 3s ReadTimeout) and never retries.
func quickClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newRecorder starts a recorder whose handler holds each request for hold.
func newRecorder(t *testing.T, fence *redis.Client, hold time.Duration, keepServing bool) *recorder {
	t.Helper()
	rec := &recorder{fence: fence, hold: hold, keepServing: keepServing}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rec.URL = "http://" + l.Addr().String()
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { _ = srv.Serve(l); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return rec
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s, wk := r.Header.Get("X-Poll-Session"), r.Header.Get("X-Poll-Worker")
	tok, err := strconv.ParseInt(r.Header.Get("X-Poll-Token"), 10, 64)
	if s == "" || wk == "" || err != nil {
		rec.mu.Lock()
		rec.bad++
		rec.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rec.mu.Lock()
	rec.inFlight++
	rec.mu.Unlock()
	defer func() {
		rec.mu.Lock()
		rec.inFlight--
		rec.mu.Unlock()
	}()
	var fence int64
	if rec.fence != nil {
		ctx, cancel := context.WithTimeout(r.Context(), fenceLookupTimeout)
		pipe := rec.fence.Pipeline()
		record := pipe.HGet(ctx, rec.keys.Fencing(s), keyspace.FieldToken)
		holder := pipe.Get(ctx, rec.keys.Lease(s))
		_, _ = pipe.Exec(ctx)
		cancel()
		fence, _ = record.Int64()
		fence = max(fence, newerTerm(holder.Val(), tok))
	}
	// The poll's own duration (not a wait for a condition); it ends early
	// when the poller goes away, as a real handler would see the
	// connection close.
	tm := time.NewTimer(rec.hold)
	abandoned := false
	if rec.keepServing {
		<-tm.C
		abandoned = r.Context().Err() != nil
	} else {
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			abandoned = true
		}
	}
	p := Poll{Session: s, Worker: wk, Token: tok, Start: start, End: time.Now(), FenceAtStart: fence, Abandoned: abandoned}
	rec.mu.Lock()
	rec.polls = append(rec.polls, p)
	rec.mu.Unlock()
	if rec.etags.Load() {
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(rec.etag.Add(1), 10)))
	}
	w.WriteHeader(http.StatusNoContent)
}

// snapshot returns a copy of the polls recorded so far.
func (rec *recorder) snapshot() []Poll {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Poll(nil), rec.polls...)
}

// polledSince returns the sessions with a poll that started at or after t,
// by a worker not in skip.
func (rec *recorder) polledSince(t time.Time, skip map[string]bool) map[string]bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := map[string]bool{}
	for i := len(rec.polls) - 1; i >= 0; i-- {
		p := rec.polls[i]
		if p.Start.Before(t) {
			continue // recorded at return: not strictly ordered by start
		}
		if !skip[p.Worker] {
			out[p.Session] = true
		}
	}
	return out
}

// newerTerm is token + 1 when the lease's owner value owner was made (by
// the holder's clock, lease.Owner.Made) after token was minted (tokens are
// the Redis clock in µs, and the holders and Redis share this machine's
// clock), plus newTermSlack: the lease is a newer acquisition's, so a poll
// with token arrived past its term. Else 0. It stands in for the fencing
// record, which holds a session's current token only from its first
// release on (acquire.lua): the history checker counts a poll whose token
// is below FenceAtStart as past its deadline.
func newerTerm(owner string, token int64) int64 {
	made := lease.ParseOwner(owner).Made
	if made.IsZero() || !made.After(time.UnixMicro(token).Add(newTermSlack)) {
		return 0
	}
	return token + 1
}

// newTermSlack covers the owner value's millisecond precision and a token
// minted up to a millisecond ahead of the clock (the slot's high-water
// mark): an owner value made this much after its own lease's token is a
// later acquisition's.
const newTermSlack = 5 * time.Millisecond

func TestNewerTerm(t *testing.T) {
	minted := time.UnixMilli(1_795_000_000_000)
	token := minted.UnixMicro() + 300
	owner := func(made time.Time) string {
		return fmt.Sprintf("w1#inc.%012x0123456789abcdef", made.UnixMilli())
	}
	tests := []struct {
		name  string
		owner string
		want  int64
	}{
		{"the poll's own lease (made before its token)", owner(minted.Add(-40 * time.Millisecond)), 0},
		{"made in the token's millisecond", owner(minted), 0},
		{"a later acquisition's", owner(minted.Add(2 * time.Second)), token + 1},
		{"an owner value without a time (an older version)", "w1#inc.0123456789abcdef", 0},
		{"no lease", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, newerTerm(tt.owner, token))
		})
	}
}
