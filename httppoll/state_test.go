package httppoll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/state"
)

// fakeSlot is a session's state slot in memory: Last is the last saved
// record; Save fails with err when set.
type fakeSlot struct {
	mu    sync.Mutex
	rec   state.Record
	saves int
	err   error
}

func (f *fakeSlot) Last() state.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec
}

// Decoded decodes the record at every call.
func (f *fakeSlot) Decoded(decode func([]byte) (any, error)) (state.Record, any, error) {
	rec := f.Last()
	v, err := decode(rec.Data)
	return rec, v, err
}

func (f *fakeSlot) Save(_ context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saves++
	if f.err != nil {
		return f.err
	}
	f.rec = state.Record{Data: data, Token: f.rec.Token + 1}
	return nil
}

// saved decodes the last saved state.
func (f *fakeSlot) saved(t *testing.T) State {
	t.Helper()
	st, err := DecodeState(f.Last().Data)
	require.NoError(t, err)
	return st
}

func (f *fakeSlot) saveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.saves
}

// target is an HTTP server whose answers the test sets, and which keeps
// the conditional headers of every request.
type target struct {
	*httptest.Server
	mu      sync.Mutex
	status  int
	body    string
	etag    string // answered, and matched against If-None-Match
	lastMod string
	seen    []http.Header
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{status: http.StatusOK, body: "one"}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		tg.seen = append(tg.seen, r.Header.Clone())
		if tg.etag != "" {
			w.Header().Set("ETag", tg.etag)
			if r.Header.Get("If-None-Match") == tg.etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		if tg.lastMod != "" {
			w.Header().Set("Last-Modified", tg.lastMod)
		}
		w.WriteHeader(tg.status)
		_, _ = w.Write([]byte(tg.body))
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) set(fn func(tg *target)) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	fn(tg)
}

// last is the headers of the last request.
func (tg *target) last(t *testing.T) http.Header {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	require.NotEmpty(t, tg.seen)
	return tg.seen[len(tg.seen)-1]
}

func TestConditionalRequests(t *testing.T) {
	tg := newTarget(t)
	tg.set(func(tg *target) { tg.etag, tg.lastMod = `"v1"`, "Tue, 24 Nov 2026 00:00:00 GMT" })
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC))
	p := newPoller(t, Config{Record: results.RecordNone, Clock: clk})
	slot := &fakeSlot{}
	s := sess(tg.URL, time.Second)

	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	h := tg.last(t)
	require.Empty(t, h.Get("If-None-Match"), "nothing saved yet: unconditional")
	require.Empty(t, h.Get("If-Modified-Since"))
	first := slot.saved(t)
	require.Equal(t, State{Version: StateVersion, Worker: "w1", URLHash: urlHash(tg.URL), Polled: clk.Now(), Status: 200,
		ETag: `"v1"`, LastModified: "Tue, 24 Nov 2026 00:00:00 GMT", BodySHA256: sha256Hex("one"),
		LastSuccess: clk.Now(), Changed: clk.Now(), LatencyMS: first.LatencyMS}, first)

	clk.Step(time.Second)
	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	h = tg.last(t)
	require.Equal(t, `"v1"`, h.Get("If-None-Match"))
	require.Equal(t, "Tue, 24 Nov 2026 00:00:00 GMT", h.Get("If-Modified-Since"))
	second := slot.saved(t)
	require.Equal(t, http.StatusNotModified, second.Status, "saved once: the status changed")
	require.Equal(t, `"v1"`, second.ETag, "a 304 keeps the validators")
	require.Equal(t, "Tue, 24 Nov 2026 00:00:00 GMT", second.LastModified)
	require.Equal(t, sha256Hex("one"), second.BodySHA256, "a 304 keeps the body hash")
	require.Equal(t, first.Changed, second.Changed, "a 304 is no change")
	require.Equal(t, clk.Now(), second.LastSuccess, "a 304 is a success")
	require.Zero(t, second.Failures)
	st := p.Stats()
	require.EqualValues(t, 1, st.Polls[OutcomeOK])
	require.EqualValues(t, 1, st.Polls[OutcomeNotModified])
	require.Zero(t, st.Changes)

	// More 304s change nothing an operator needs: no write.
	clk.Step(time.Second)
	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	require.Equal(t, 2, slot.saveCount())

	// A new version is fetched whole and recorded as a change.
	tg.set(func(tg *target) { tg.etag, tg.body = `"v2"`, "two" })
	clk.Step(time.Second)
	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	require.Equal(t, `"v1"`, tg.last(t).Get("If-None-Match"))
	third := slot.saved(t)
	require.Equal(t, 3, slot.saveCount())
	require.Equal(t, 200, third.Status)
	require.Equal(t, `"v2"`, third.ETag)
	require.Equal(t, sha256Hex("two"), third.BodySHA256)
	require.Equal(t, clk.Now(), third.Changed)
	require.EqualValues(t, 1, p.Stats().Changes)
}

func TestBodyChangeAndSavePolicy(t *testing.T) {
	tg := newTarget(t) // no validators: every poll fetches the body
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC))
	failures := &failureRecord{}
	p := newPoller(t, Config{Record: results.RecordNone, Clock: clk, StateRefresh: 10 * time.Second, Failures: failures})
	slot := &fakeSlot{}
	s := sess(tg.URL, time.Second)
	poll := func() {
		t.Helper()
		clk.Step(time.Second)
		_ = p.poll(ctxT(t), s, nil, slot)
		require.Empty(t, tg.last(t).Get("If-None-Match"))
	}

	poll()
	start := slot.saved(t).Changed
	require.Equal(t, 1, slot.saveCount())
	for range 9 { // up to 9 s after the save, the same answer: nothing to write
		poll()
	}
	require.Equal(t, 1, slot.saveCount())
	poll() // 10 s after the save: refreshed, so last_success is at most that stale
	require.Equal(t, 2, slot.saveCount())
	require.Equal(t, clk.Now(), slot.saved(t).LastSuccess)
	require.Equal(t, start, slot.saved(t).Changed, "a refresh is no change")
	require.Zero(t, p.Stats().Changes)

	tg.set(func(tg *target) { tg.body = "changed" })
	poll()
	require.Equal(t, 3, slot.saveCount())
	require.Equal(t, clk.Now(), slot.saved(t).Changed)
	require.EqualValues(t, 1, p.Stats().Changes)

	// Failures: each changes the count, so each is saved; the backoff
	// shown is the coordinator's (2^k - 1) × interval.
	tg.set(func(tg *target) { tg.status = http.StatusServiceUnavailable })
	poll()
	failedAt := clk.Now()
	for k := 1; k <= 3; k++ {
		if k > 1 {
			poll()
		}
		got := slot.saved(t)
		require.Equal(t, 3+k, slot.saveCount())
		require.Equal(t, k, got.Failures)
		require.Equal(t, "server", got.Error)
		require.Equal(t, 503, got.Status)
		require.Equal(t, failedAt, got.FailingSince)
		require.Equal(t, time.Duration((1<<k)-1)*time.Second, got.Backoff())
	}
	require.EqualValues(t, 2, p.Stats().Changes, "200 -> 503 is one change; 503 again is none")
	require.Equal(t, []string{"s1"}, failures.failing())
	require.Equal(t, slot.saved(t), failures.last["s1"].st, "the tracker is told the state saved")

	tg.set(func(tg *target) { tg.status = http.StatusOK })
	poll()
	got := slot.saved(t)
	require.Zero(t, got.Failures)
	require.True(t, got.FailingSince.IsZero())
	require.Zero(t, got.BackoffMS)
	require.Empty(t, failures.failing())
}

func TestSaveErrorsNotRetried(t *testing.T) {
	tests := []struct {
		name string
		give error
		want func(Stats) uint64
	}{
		{name: "stale", give: fmt.Errorf("save s1: %w", state.ErrStale), want: func(s Stats) uint64 { return s.StateStale }},
		{name: "too large", give: fmt.Errorf("save s1: %w", state.ErrTooLarge), want: func(s Stats) uint64 { return s.StateTooLarge }},
		{name: "redis", give: errors.New("connection refused"), want: func(s Stats) uint64 { return s.StateFailed }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg := newTarget(t)
			p := newPoller(t, Config{Record: results.RecordNone})
			slot := &fakeSlot{err: tt.give}
			require.NoError(t, p.poll(ctxT(t), sess(tg.URL, time.Second), nil, slot), "a failed save does not fail the poll")
			require.Equal(t, 1, slot.saveCount(), "not retried")
			require.EqualValues(t, 1, tt.want(p.Stats()))
			require.Zero(t, p.Stats().StateSaves)
		})
	}
}

func TestUnreadableStateStartsAfresh(t *testing.T) {
	tg := newTarget(t)
	tg.set(func(tg *target) { tg.etag = `"v1"` })
	p := newPoller(t, Config{Record: results.RecordNone})
	for _, data := range []string{`{"v":2,"etag":"\"v1\""}`, `not json`} {
		slot := &fakeSlot{rec: state.Record{Data: []byte(data), Token: 7}}
		require.NoError(t, p.poll(ctxT(t), sess(tg.URL, time.Second), nil, slot))
		require.Empty(t, tg.last(t).Get("If-None-Match"), data)
		require.Equal(t, `"v1"`, slot.saved(t).ETag)
	}
}

func TestOversizedValidatorsNotKept(t *testing.T) {
	tg := newTarget(t)
	long := `"` + strings.Repeat("x", MaxETagBytes) + `"`
	tg.set(func(tg *target) { tg.etag = long })
	p := newPoller(t, Config{Record: results.RecordNone})
	slot := &fakeSlot{}
	s := sess(tg.URL, time.Second)
	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	require.Empty(t, slot.saved(t).ETag)
	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	require.Empty(t, tg.last(t).Get("If-None-Match"))
	require.Less(t, len(slot.Last().Data), 1024)
}

// TestCancelledPollSavesNothing: a poll cut short by its lease ending is
// neither a failure nor a success, and saves nothing.
func TestCancelledPollSavesNothing(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	failures := &failureRecord{}
	p := newPoller(t, Config{Record: results.RecordNone, Failures: failures})
	slot := &fakeSlot{}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- p.poll(ctx, sess(srv.URL, 5*time.Second), nil, slot) }()
	cancel()
	require.Error(t, <-done)
	require.Zero(t, slot.saveCount())
	require.EqualValues(t, 1, p.Stats().Polls[OutcomeCancelled])
	require.Empty(t, failures.last, "the tracker is not told")
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestURLChangeStartsAfresh: a session whose URL changed (sessions add
// --replace) never sends the old URL's validators to the new one.
func TestURLChangeStartsAfresh(t *testing.T) {
	tg := newTarget(t)
	tg.set(func(tg *target) { tg.etag = `"v1"` })
	p := newPoller(t, Config{Record: results.RecordNone})
	slot := &fakeSlot{}
	require.NoError(t, p.poll(ctxT(t), sess(tg.URL+"/a", time.Second), nil, slot))
	require.NoError(t, p.poll(ctxT(t), sess(tg.URL+"/a", time.Second), nil, slot))
	require.Equal(t, `"v1"`, tg.last(t).Get("If-None-Match"))

	require.NoError(t, p.poll(ctxT(t), sess(tg.URL+"/b", time.Second), nil, slot))
	require.Empty(t, tg.last(t).Get("If-None-Match"), "not the validator of /a")
	require.Equal(t, urlHash(tg.URL+"/b"), slot.saved(t).URLHash)
	require.Equal(t, 200, slot.saved(t).Status)
	require.Zero(t, p.Stats().Changes, "a new URL starts afresh: no change counted")
}

// TestGarbageStateStartsAfresh: saved data that is not a State (garbage,
// another version, JSON of another shape) never stops the session: the
// poll runs unconditionally and its save replaces the garbage.
func TestGarbageStateStartsAfresh(t *testing.T) {
	for _, garbage := range []string{"garbage", `{"v":1,"status":"x"}`, `{"v":99}`, "null", "[]", "\xff\xfe", `{"v":1,"etag":"\"v1\""`} {
		t.Run(garbage, func(t *testing.T) {
			tg := newTarget(t)
			tg.set(func(tg *target) { tg.etag = `"v2"` })
			p := newPoller(t, Config{Record: results.RecordNone})
			slot := &fakeSlot{rec: state.Record{Data: []byte(garbage), Token: 7}}
			require.NoError(t, p.poll(ctxT(t), sess(tg.URL, time.Second), nil, slot))
			require.Empty(t, tg.last(t).Get("If-None-Match"))
			require.Equal(t, 200, slot.saved(t).Status)
			require.Equal(t, 1, slot.saveCount())
		})
	}
}

// TestChangedAcrossHandoffs: a result's Changed compares against the
// session's saved state, whoever saved it: the next holder of a session
// (another Poller, the same slot) does not report the content its
// predecessor saw as a change, and reports a new body, a new ETag (a 304
// to the new validator is the same content) and a new status once each.
func TestChangedAcrossHandoffs(t *testing.T) {
	f := newFixture(t)
	tg := newTarget(t)
	slot := &fakeSlot{}
	w1 := newPoller(t, Config{Client: f.client, Worker: "w1"})
	w2 := newPoller(t, Config{Client: f.client, Worker: "w2"})
	s := sess(tg.URL, time.Second)
	steps := []struct {
		by   *Poller
		set  func(tg *target)
		want string // changed, then the content hash
	}{
		{by: w1, want: "1 " + sha256Hex("one")},                                             // the first poll
		{by: w1, want: "0 " + sha256Hex("one")},                                             // the same
		{by: w2, want: "0 " + sha256Hex("one")},                                             // handed off: still the same
		{by: w2, set: func(tg *target) { tg.body = "two" }, want: "1 " + sha256Hex("two")},  // a new body
		{by: w1, want: "0 " + sha256Hex("two")},                                             // back to w1: the same
		{by: w1, set: func(tg *target) { tg.etag = `"e2"` }, want: "1 " + sha256Hex("two")}, // a new ETag
		{by: w2, want: "0 " + sha256Hex("two")},                                             // a 304 to it
		{by: w2, set: func(tg *target) { tg.etag, tg.status = "", 500 }, want: "1 "},        // a new status
		{by: w1, want: "0 "}, // the same failure
	}
	for i, step := range steps {
		if step.set != nil {
			tg.set(step.set)
		}
		_ = step.by.poll(ctxT(t), s, nil, slot)
		entries := recorded(t, f.client)
		require.Len(t, entries, i+1)
		got := entries[i]["changed"].(string) + " " + entries[i]["body_sha256"].(string)
		require.Equal(t, step.want, got, "step %d", i)
	}
	require.Equal(t, http.StatusNotModified, statusOf(t, recorded(t, f.client)[6]), "step 6 was a 304")
}

func statusOf(t *testing.T, entry map[string]any) int {
	t.Helper()
	n, err := strconv.Atoi(entry["status"].(string))
	require.NoError(t, err)
	return n
}

func TestHasURLHash(t *testing.T) {
	for _, tc := range []struct {
		hash, url string
		want      bool
	}{
		{urlHash("http://127.0.0.1/s/1"), "http://127.0.0.1/s/1", true},
		{urlHash("http://127.0.0.1/s/1"), "http://127.0.0.1/s/2", false},
		{"", "http://127.0.0.1/s/1", false},
		{urlHash(""), "", true},
	} {
		require.Equal(t, tc.want, hasURLHash(tc.hash, tc.url), "%q %q", tc.hash, tc.url)
	}
}

// TestCutShortAnswerIsNoContent: a 2xx whose body ends before its
// Content-Length fails, and keeps neither its validators nor the hash of
// the part read, so the next poll asks unconditionally rather than have a
// 304 stand for content never read.
func TestCutShortAnswerIsNoContent(t *testing.T) {
	var mu sync.Mutex
	var seen []string // If-None-Match of every request
	cut := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get("If-None-Match"))
		w.Header().Set("ETag", `"e1"`)
		if r.Header.Get("If-None-Match") == `"e1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if cut {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("partial")) // the server closes the connection short
			return
		}
		_, _ = w.Write([]byte("whole"))
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Record: results.RecordNone})
	slot := &fakeSlot{}
	s := sess(srv.URL, time.Second)

	require.ErrorContains(t, p.poll(ctxT(t), s, nil, slot), "read body")
	st := slot.saved(t)
	require.Empty(t, st.ETag, "validators of a body cut short")
	require.Empty(t, st.BodySHA256, "the hash of a part")
	require.Equal(t, 1, st.Failures)

	mu.Lock()
	cut = false
	mu.Unlock()
	require.NoError(t, p.poll(ctxT(t), s, nil, slot))
	mu.Lock()
	require.Equal(t, []string{"", ""}, seen, "the poll after a cut-short answer asks unconditionally")
	mu.Unlock()
	st = slot.saved(t)
	require.Equal(t, `"e1"`, st.ETag)
	require.Equal(t, sha256Hex("whole"), st.BodySHA256)
}

func TestContentHash(t *testing.T) {
	st := State{BodySHA256: "h"}
	for _, tt := range []struct {
		name string
		resp response
		want string
	}{
		{"200 read whole", response{status: 200, bodyHash: "h"}, "h"},
		{"200 cut short", response{status: 200}, ""},
		{"304 stands for the saved content", response{status: 304}, "h"},
		{"500", response{status: 500}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, contentHash(st, tt.resp))
		})
	}
}
