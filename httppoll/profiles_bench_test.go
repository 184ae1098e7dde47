package httppoll

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
)

// BenchmarkPollProfile compares the cost of a poll of a session with a
// profile (a bearer token and an API key read from files, stat'ed at each
// poll) and two session headers against the same poll of a plain session
// (issue 24: within 10%), with saved state, against a local target
// answering 204. It reports the time per poll of each kind and their
// ratio (profile / plain).
//
// Run: go test -run '^$' -bench BenchmarkPollProfile -benchmem -count 5 ./httppoll
func BenchmarkPollProfile(b *testing.B) {
	plain, withProfile, profiles := profileBenchSetup(b)
	p, err := New(Config{Worker: "w1", Record: results.RecordNone, Profiles: profiles})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.CloseIdleConnections)
	// The two kinds run interleaved, in batches of 20 polls, so that the
	// load of a shared machine weighs on both alike; the ratio is what
	// counts.
	slot := &fakeSlot{}
	ctx := context.Background()
	var took [2]time.Duration
	polls := [2]int{}
	kinds := [2]session.Session{plain, withProfile}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := (i / 20) % 2
		i++
		start := time.Now()
		if err := p.poll(ctx, kinds[k], nil, slot); err != nil {
			b.Fatal(err)
		}
		took[k] += time.Since(start)
		polls[k]++
	}
	if polls[0] > 0 && polls[1] > 0 {
		plainNS := float64(took[0].Nanoseconds()) / float64(polls[0])
		profileNS := float64(took[1].Nanoseconds()) / float64(polls[1])
		b.ReportMetric(plainNS, "plain-ns/poll")
		b.ReportMetric(profileNS, "profile-ns/poll")
		b.ReportMetric(profileNS/plainNS, "ratio")
	}
}

// BenchmarkProfileApply measures what applying a profile adds to a
// request: two files stat'ed (and not re-read) and two headers set.
//
// Run: go test -run '^$' -bench BenchmarkProfileApply -benchmem ./httppoll
func BenchmarkProfileApply(b *testing.B) {
	dir := b.TempDir()
	token, key := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	for path, v := range map[string]string{token: "tok-0123456789abcdef", key: "key-0123456789abcdef"} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	ps, err := newProfiles("w1", map[string]Profile{"api": {BearerTokenFile: token, Headers: map[string]SecretValue{"X-Api-Key": {File: key}}}},
		DefaultProfileRecheck, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ps.apply("api", req); err != nil {
			b.Fatal(err)
		}
	}
}

// profileBenchSetup starts a local target answering 204 and returns a
// plain session of it, the same session with the profile "api" (a bearer
// token and an API key read from files) and two headers, and the
// profiles.
func profileBenchSetup(b *testing.B) (plain, withProfile session.Session, profiles map[string]Profile) {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.Cleanup(srv.Close)
	dir := b.TempDir()
	token, key := filepath.Join(dir, "token"), filepath.Join(dir, "key")
	for path, v := range map[string]string{token: "tok-0123456789abcdef", key: "key-0123456789abcdef"} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	plain = sess(srv.URL, time.Second)
	withProfile = plain
	withProfile.Profile = "api"
	withProfile.Headers = map[string]string{"Accept": "application/json", "X-Client": "pollworker-bench"}
	return plain, withProfile, map[string]Profile{
		"api": {BearerTokenFile: token, Headers: map[string]SecretValue{"X-Api-Key": {File: key}}}}
}
