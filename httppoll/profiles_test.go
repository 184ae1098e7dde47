package httppoll

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
)

func TestParseProfiles(t *testing.T) {
	tests := []struct {
		name, give, want string // want: "" for valid, else part of the error
	}{
		{name: "full", give: `profiles:
  github:
    bearer_token_file: /s/token
    headers:
      X-Api-Key: {file: /s/key}
      X-From-Env: {env: KEY}
      Accept: application/json
    tls: {ca_file: /ca.pem, cert_file: c.pem, key_file: k.pem, server_name: api.internal, insecure_skip_verify: false}
  basic:
    basic_auth: {username: bot, password_file: /s/pw}
`},
		{name: "empty", give: ""},
		{name: "unknown field", give: "profiles:\n  a: {bearer_token: x}\n", want: "field bearer_token not found"},
		{name: "unknown top-level", give: "profile:\n  a: {}\n", want: "field profile not found"},
		{name: "bad name", give: "profiles:\n  'a b': {}\n", want: `profile name "a b" may hold only letters`},
		{name: "header both", give: "profiles:\n  a: {headers: {X: {file: f, env: E}}}\n", want: "want a string, {file: PATH} or {env: NAME}"},
		{name: "fencing header", give: "profiles:\n  a: {headers: {X-Poll-Token: '1'}}\n", want: "header X-Poll-Token is a fencing header"},
		{name: "basic without file", give: "profiles:\n  a: {basic_auth: {username: u}}\n", want: "basic_auth needs username and password_file"},
		{name: "bearer and basic", give: "profiles:\n  a: {bearer_token_file: t, basic_auth: {username: u, password_file: p}}\n", want: "not both"},
		{name: "cert without key", give: "profiles:\n  a: {tls: {cert_file: c}}\n", want: "cert_file and key_file go together"},
		{name: "bad header name", give: "profiles:\n  a: {headers: {'Bad Name': v}}\n", want: `header "Bad Name" is not a valid header name`},
		{name: "CR LF in a value", give: "profiles:\n  a: {headers: {X-Ok: \"v\\r\\nX-Injected: 1\"}}\n", want: "the value of header X-Ok holds a control character"},
		{name: "transport header", give: "profiles:\n  a: {headers: {Host: h}}\n", want: "header Host is set by the HTTP transport"},
		{name: "authorization header", give: "profiles:\n  a: {headers: {Authorization: {file: f}}}\n"},
		{name: "authorization and bearer", give: "profiles:\n  a: {bearer_token_file: t, headers: {Authorization: x}}\n", want: "give header Authorization or bearer_token_file/basic_auth, not both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProfiles([]byte(tt.give))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrProfiles)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// headerTarget records the headers of the requests it serves.
type headerTarget struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newHeaderTarget(t *testing.T, tlsServer bool) *headerTarget {
	ht := &headerTarget{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ht.mu.Lock()
		ht.seen = append(ht.seen, r.Header.Clone())
		ht.mu.Unlock()
	})
	if tlsServer {
		ht.srv = httptest.NewTLSServer(h)
	} else {
		ht.srv = httptest.NewServer(h)
	}
	t.Cleanup(ht.srv.Close)
	return ht
}

func (ht *headerTarget) requests() []http.Header {
	ht.mu.Lock()
	defer ht.mu.Unlock()
	return append([]http.Header(nil), ht.seen...)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// TestProfileCredentials: a bearer token and an API key are read from
// files, a rotated token is sent from the next poll on, a header comes
// from the environment, and basic auth from a password file.
func TestProfileCredentials(t *testing.T) {
	dir := t.TempDir()
	token, key, pw := filepath.Join(dir, "token"), filepath.Join(dir, "key"), filepath.Join(dir, "pw")
	writeFile(t, token, "tok-1\n")
	writeFile(t, key, "key-1")
	writeFile(t, pw, "pw-1")
	t.Setenv("HTTPPOLL_TEST_KEY", "env-1")
	f := newFixture(t)
	ht := newHeaderTarget(t, false)
	p := newPoller(t, Config{Client: f.client, ProfileRecheck: -1, Profiles: map[string]Profile{
		"api": {BearerTokenFile: token, Headers: map[string]SecretValue{
			"X-Api-Key": {File: key}, "X-Env": {Env: "HTTPPOLL_TEST_KEY"}, "X-Plain": {Value: "plain"}}},
		"basic": {BasicAuth: &BasicAuth{Username: "bot", PasswordFile: pw}},
	}})
	require.Equal(t, []string{"api", "basic"}, p.Profiles())
	s := sess(ht.srv.URL, time.Second)
	s.Profile = "api"
	s.Headers = map[string]string{"X-Plain": "from the session", "Accept": "text/plain"}

	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)))
	writeFile(t, token, "tok-2-longer") // rotated: another size
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)))
	s.Profile = "basic"
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)))

	got := ht.requests()
	require.Len(t, got, 3)
	require.Equal(t, "Bearer tok-1", got[0].Get("Authorization"))
	require.Equal(t, "key-1", got[0].Get("X-Api-Key"))
	require.Equal(t, "env-1", got[0].Get("X-Env"))
	require.Equal(t, "plain", got[0].Get("X-Plain"), "the profile's header wins over the session's")
	require.Equal(t, "text/plain", got[0].Get("Accept"))
	require.Equal(t, "Bearer tok-2-longer", got[1].Get("Authorization"), "the rotated token, at the next poll")
	require.Equal(t, "Basic Ym90OnB3LTE=", got[2].Get("Authorization")) // bot:pw-1
}

// TestProfileFailures: an unknown profile, a missing file, an empty file
// and an unset variable fail the poll without sending it, with an error
// naming the profile and the file, never a secret; the result and the
// metrics say so.
func TestProfileFailures(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, " \n")
	tests := []struct {
		name    string
		profile Profile
		use     string
		want    string
	}{
		{name: "unknown", use: "nope", want: "profile nope: not configured on worker w1 (its profiles: p): the session is not polled here"},
		{name: "missing file", profile: Profile{BearerTokenFile: filepath.Join(dir, "missing")}, use: "p",
			want: "profile p: bearer_token_file: cannot read " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{name: "empty file", profile: Profile{Headers: map[string]SecretValue{"X-Key": {File: empty}}}, use: "p",
			want: "profile p: header X-Key: file " + empty + " is empty"},
		{name: "unset variable", profile: Profile{Headers: map[string]SecretValue{"X-Key": {Env: "HTTPPOLL_TEST_UNSET"}}}, use: "p",
			want: "profile p: header X-Key: environment variable HTTPPOLL_TEST_UNSET is unset or empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ht := newHeaderTarget(t, false)
			p := newPoller(t, Config{Client: f.client, Profiles: map[string]Profile{"p": tt.profile}})
			s := sess(ht.srv.URL, time.Second)
			s.Profile = tt.use
			err := p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil))
			var pe *ProfileError
			require.ErrorAs(t, err, &pe)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, tt.name == "unknown", pe.Unknown)
			require.Empty(t, ht.requests(), "nothing sent")
			require.EqualValues(t, 1, p.Stats().Polls[OutcomeProfileError])
			res := recorded(t, f.client)
			require.Len(t, res, 1)
			require.Contains(t, res[0]["error"], tt.want)
		})
	}
}

// TestProfileProblemsSaidAtStart: New warns of each profile that cannot be
// applied now (a token file not there yet, a variable unset), one line
// each, naming the problem; a worker with a missing token file said
// nothing before its first poll of a session of that profile.
func TestProfileProblemsSaidAtStart(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	writeFile(t, token, "secret\n")
	core, logs := observer.New(zap.WarnLevel)
	_, err := New(Config{Worker: "w1", Record: results.RecordNone, Logger: zap.New(core), Profiles: map[string]Profile{
		"ok":      {BearerTokenFile: token},
		"missing": {BearerTokenFile: filepath.Join(dir, "missing")},
		"unset":   {Headers: map[string]SecretValue{"X-Key": {Env: "HTTPPOLL_TEST_UNSET"}}},
	}})
	require.NoError(t, err)
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.ContextMap()["error"].(string))
	}
	require.Equal(t, []string{
		"httppoll: profile missing: bearer_token_file: cannot read " + filepath.Join(dir, "missing") + ": no such file or directory",
		"httppoll: profile unset: header X-Key: environment variable HTTPPOLL_TEST_UNSET is unset or empty",
	}, got)
}

// TestProfileTLS: a self-signed target is trusted through the profile's
// ca_file, only for the profile's sessions; a new CA file is read at the
// next poll.
func TestProfileTLS(t *testing.T) {
	ht := newHeaderTarget(t, true)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ht.srv.Certificate().Raw})))
	f := newFixture(t)
	p := newPoller(t, Config{Client: f.client, ProfileRecheck: -1, Profiles: map[string]Profile{"private": {TLS: &TLSFiles{CAFile: ca}}}})
	s := sess(ht.srv.URL, time.Second)

	err := p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil))
	require.Error(t, err, "the system roots do not trust it")
	require.Equal(t, classTLS, classify(err))

	s.Profile = "private"
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)))

	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherCert(t)})))
	require.Error(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)), "another CA, read at the next poll")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ht.srv.Certificate().Raw}))+"\n")
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)), "the right CA again, at the next poll")

	writeFile(t, ca, "not a pem")
	require.ErrorContains(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)), "profile private: tls: ca_file "+ca+" holds no PEM certificate")
	require.ErrorContains(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)), "holds no PEM certificate",
		"the CA the file no longer holds is not trusted at the polls after")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ht.srv.Certificate().Raw})))
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)), "the right CA again")
}

// otherCert is a self-signed certificate of no server of the tests, DER.
func otherCert(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "other"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return der
}

// TestRedirects: a loop fails once after one request per URL in it; more
// than MaxRedirects fail; a change of scheme is refused; a session with a
// profile is not redirected to another host.
func TestRedirects(t *testing.T) {
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/self", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/self", http.StatusFound)
	})
	mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) { hits.Add(1); http.Redirect(w, r, "/b", http.StatusFound) })
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) { hits.Add(1); http.Redirect(w, r, "/a", http.StatusFound) })
	mux.HandleFunc("/chain", func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		http.Redirect(w, r, fmt.Sprintf("/chain?n=%d", n), http.StatusFound)
	})
	mux.HandleFunc("/https", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "https://"+r.Host+"/", http.StatusFound)
	})
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(other.Close)
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, other.URL, http.StatusFound)
	})
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/done", http.StatusFound)
	})
	mux.HandleFunc("/done", func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f := newFixture(t)
	p := newPoller(t, Config{Client: f.client, Profiles: map[string]Profile{"p": {}}})
	tests := []struct {
		path, profile string
		want          string // "" for success
		hits          int64
	}{
		{path: "/ok", hits: 2},
		{path: "/self", want: "redirect not followed: a loop (after 1 requests)", hits: 1},
		{path: "/a", want: "a loop (after 2 requests)", hits: 2},
		{path: "/chain", want: "more than 5 redirects", hits: 6},
		{path: "/https", want: "from http to https", hits: 1},
		{path: "/away", hits: 1},
		{path: "/away", profile: "p", want: "to another host, which profile p's credentials would follow", hits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.path+tt.profile, func(t *testing.T) {
			hits.Store(0)
			s := sess(srv.URL+tt.path, time.Second)
			s.Profile = tt.profile
			err := p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil))
			require.Equal(t, tt.hits, hits.Load())
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			var re *RedirectError
			require.ErrorAs(t, err, &re)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), srv.URL, "no URL in the error")
		})
	}
}

// TestBadLocationIsNotQuoted: net/http quotes a Location that does not
// parse inside its error; the poll's error does not (it may hold a key).
func TestBadLocationIsNotQuoted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "http://[::1%zz]:80/secret?token=LOCSECRET")
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t)
	p := newPoller(t, Config{Client: f.client})
	err := p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL+"/?key=s3cret", time.Second), f.lease, nil))
	require.ErrorContains(t, err, "the Location header of a redirect is not a URL")
	require.NotContains(t, err.Error(), "LOCSECRET")
	require.NotContains(t, err.Error(), "s3cret")
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		give string
		max  time.Duration
		want time.Duration
	}{
		{"5", time.Minute, 5 * time.Second},
		{" 30 ", time.Minute, 30 * time.Second},
		{"3600", 10 * time.Minute, 10 * time.Minute},
		{"99999999999999999", 10 * time.Minute, 10 * time.Minute},
		{"99999999999999999999", 10 * time.Minute, 10 * time.Minute},
		{"-99999999999999999999", 10 * time.Minute, 0},
		{"0", time.Minute, 0},
		{"-5", time.Minute, 0},
		{"soon", time.Minute, 0},
		{"", time.Minute, 0},
		{"5", -1, 0},
		{now.Add(42 * time.Second).Format(http.TimeFormat), time.Minute, 42 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), time.Minute, 0},
		{now.Add(time.Hour).Format(http.TimeFormat), time.Minute, time.Minute},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, retryAfter(tt.give, now, tt.max), "%q max %v", tt.give, tt.max)
	}
}

// TestPollThrottled: a 429 or 503 with Retry-After fails with a
// poller.RetryAfterError of that delay, counted as throttled; without the
// header it is a plain failure.
func TestPollThrottled(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ra := r.URL.Query().Get("ra"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client, MaxRetryAfter: time.Minute})

	err := p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL+"/?ra=5", time.Second), f.lease, nil))
	var ra *poller.RetryAfterError
	require.ErrorAs(t, err, &ra)
	require.Equal(t, 5*time.Second, ra.Delay)
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusTooManyRequests, se.Code)
	require.EqualValues(t, 1, p.Stats().Throttled)

	err = p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL+"/?ra=3600", time.Second), f.lease, nil))
	require.ErrorAs(t, err, &ra)
	require.Equal(t, time.Minute, ra.Delay, "bounded by MaxRetryAfter")

	err = p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil))
	require.Error(t, err)
	require.False(t, errors.As(err, &ra))
	require.EqualValues(t, 2, p.Stats().Throttled)
}

// TestPollExpectedThrottleWaits: a 429 the session expects is no failure,
// but its Retry-After still holds the next poll back: Poll returns a
// poller.RetryAfterError without an error in it (before, the delay was
// dropped with the error, and the target was polled again at the next
// interval).
func TestPollExpectedThrottleWaits(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client, MaxRetryAfter: time.Minute})
	s := sess(srv.URL, time.Second)
	s.Expect = "200-299,429"
	err := p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil))
	var ra *poller.RetryAfterError
	require.ErrorAs(t, err, &ra)
	require.Equal(t, 7*time.Second, ra.Delay)
	require.NoError(t, ra.Err, "an expected status is no failure")
	var se *StatusError
	require.False(t, errors.As(err, &se))
	require.EqualValues(t, 1, p.Stats().Throttled)
}
