package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// apiTarget is a local API with the behaviours of issue 24: auth by
// bearer token or API key, a POST endpoint, fixed statuses, a 429 with
// Retry-After and a redirect loop. It records each request.
type apiTarget struct {
	mu   sync.Mutex
	reqs map[string][]apiRequest // path -> requests
	// bearer and key are the credentials it accepts.
	bearer, key string
}

// apiRequest is one request seen by apiTarget.
type apiRequest struct {
	at     time.Time
	auth   string
	header http.Header
	method string
	body   string
}

func (a *apiTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.reqs[r.URL.Path] = append(a.reqs[r.URL.Path], apiRequest{at: time.Now(), auth: r.Header.Get("Authorization"),
		header: r.Header.Clone(), method: r.Method, body: string(body)})
	bearer, key := a.bearer, a.key
	a.mu.Unlock()
	switch r.URL.Path {
	case "/auth":
		if r.Header.Get("Authorization") != "Bearer "+bearer {
			w.WriteHeader(http.StatusUnauthorized)
		}
	case "/key":
		if r.Header.Get("X-Api-Key") != key {
			w.WriteHeader(http.StatusForbidden)
		}
	case "/post":
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.WriteHeader(http.StatusCreated)
	case "/401":
		w.WriteHeader(http.StatusUnauthorized)
	case "/403":
		w.WriteHeader(http.StatusForbidden)
	case "/429":
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusTooManyRequests)
	case "/loop":
		http.Redirect(w, r, "/loop", http.StatusFound)
	}
}

func (a *apiTarget) requests(path string) []apiRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]apiRequest(nil), a.reqs[path]...)
}

// TestRealAPIPoller (issue 24 acceptance): the built binary polls real
// APIs through worker-side profiles: a bearer token from a file rotated
// while running, an API key from a file, a POST expecting 201, a
// self-signed HTTPS target trusted through tls.ca_file (and failing
// without it), 401/403/405 counted as failures, Retry-After honoured, a
// redirect loop failing once per poll, an unknown profile not polled and
// reported; afterwards no secret is in Redis, the log, status, export or
// the results.
func TestRealAPIPoller(t *testing.T) {
	const token1, token2, apiKey = "tok-secret-AAAA1111", "tok-secret-BBBB2222", "key-secret-CCCC3333"
	secrets := []string{token1, token2, apiKey}
	api := &apiTarget{reqs: map[string][]apiRequest{}, bearer: token1, key: apiKey}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(api)
	t.Cleanup(tlsSrv.Close)

	dir := t.TempDir()
	tokenFile, keyFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "key"), filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token1+"\n"), 0o600))
	require.NoError(t, os.WriteFile(keyFile, []byte(apiKey), 0o600))
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600))
	profiles := filepath.Join(dir, "profiles.yaml")
	require.NoError(t, os.WriteFile(profiles, fmt.Appendf(nil, `profiles:
  bearer: {bearer_token_file: %s}
  apikey:
    headers:
      X-Api-Key: {file: %s}
  private-ca:
    tls: {ca_file: %s}
`, tokenFile, keyFile, caFile), 0o600))

	rds := startRedis(t)
	w := startWorker(t, rds.URL(), "w1", "--profiles", profiles, "--http-addr", "127.0.0.1:0")
	add := func(id, path string, extra ...string) string {
		t.Helper()
		url := srv.URL + path
		if strings.HasPrefix(path, "https://") {
			url = path
		}
		args := append([]string{"sessions", "--redis-url", rds.URL(), "add", "--id", id, "--url", url, "--interval", "1s"}, extra...)
		out, err := pollworker(t, args...)
		require.NoError(t, err, out)
		return out
	}
	add("auth", "/auth", "--profile", "bearer")
	add("key", "/key", "--profile", "apikey", "--header", "Accept: application/json")
	add("post", "/post", "--method", "POST", "--header", "Content-Type: application/json", "--body", `{"q":1}`, "--expect", "201")
	add("s401", "/401")
	add("s403", "/403")
	add("s405", "/post") // a GET
	add("s429", "/429")
	add("loop", "/loop")
	add("tls", tlsSrv.URL+"/tls", "--profile", "private-ca")
	add("tls-noca", tlsSrv.URL+"/tls-noca")

	// The worker is live once it polled: then an unknown profile warns.
	require.Eventually(t, func() bool { return len(api.requests("/auth")) >= 2 }, 30*time.Second, 50*time.Millisecond)
	out := add("unknown", "/unknown", "--profile", "nope")
	require.Contains(t, out, "warning: no live worker has profile nope")

	// Rotate the token: the next polls carry the new one.
	require.NoError(t, os.WriteFile(tokenFile, []byte(token2), 0o600))
	api.mu.Lock()
	api.bearer = token2
	api.mu.Unlock()
	require.Eventually(t, func() bool {
		reqs := api.requests("/auth")
		return len(reqs) > 0 && reqs[len(reqs)-1].auth == "Bearer "+token2 && len(api.requests("/429")) >= 2
	}, 30*time.Second, 50*time.Millisecond)
	rotated := false
	for _, r := range api.requests("/auth") {
		if r.auth == "Bearer "+token2 {
			rotated = true
		} else {
			require.False(t, rotated, "a request with the old token after the new one: %q", r.auth)
			require.Equal(t, "Bearer "+token1, r.auth)
		}
	}

	// Retry-After: 5 at a 1 s interval: no request follows the previous
	// one sooner than 5 s (so at most 3 in any 10 s), whatever the speed.
	reqs429 := api.requests("/429")
	for i := 1; i < len(reqs429); i++ {
		require.GreaterOrEqual(t, reqs429[i].at.Sub(reqs429[i-1].at), 5*time.Second-10*time.Millisecond, "request %d", i)
	}

	state := func(id string) map[string]any {
		t.Helper()
		out, err := pollworker(t, "sessions", "--redis-url", rds.URL(), "get", id, "--json")
		require.NoError(t, err, out)
		var v struct {
			State struct {
				HTTP map[string]any `json:"http"`
			} `json:"state"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.State.HTTP
	}
	// The failing sessions of the fleet, from Redis.
	var failing struct {
		Failing []struct {
			ID       string `json:"id"`
			Status   int    `json:"status"`
			Class    string `json:"class"`
			Message  string `json:"message"`
			Failures int    `json:"failures"`
		} `json:"failing"`
	}
	require.Eventually(t, func() bool {
		out, err := pollworker(t, "sessions", "--redis-url", rds.URL(), "list", "--failing", "--json")
		require.NoError(t, err, out)
		require.NoError(t, json.Unmarshal([]byte(out), &failing), out)
		return len(failing.Failing) == 7
	}, 20*time.Second, 100*time.Millisecond)
	got := map[string]string{}
	for _, f := range failing.Failing {
		got[f.ID] = fmt.Sprintf("%d %s", f.Status, f.Class)
		require.Positive(t, f.Failures, f.ID)
		require.NotEmpty(t, f.Message, f.ID)
	}
	require.Equal(t, map[string]string{"s401": "401 status", "s403": "403 status", "s405": "405 status", "s429": "429 status",
		"loop": "0 redirect", "tls-noca": "0 tls", "unknown": "0 profile"}, got)
	for _, id := range []string{"auth", "key", "post", "tls"} {
		st := state(id)
		require.EqualValues(t, 0, st["failures"], id)
	}
	require.EqualValues(t, 201, state("post")["status"])
	// s405 GETs /post too: look at the requests of session post alone.
	var post []apiRequest
	for _, r := range api.requests("/post") {
		if r.header.Get("X-Poll-Session") == "post" {
			post = append(post, r)
		}
	}
	require.NotEmpty(t, post)
	require.Equal(t, http.MethodPost, post[0].method)
	require.Equal(t, `{"q":1}`, post[0].body)
	require.Equal(t, apiKey, api.requests("/key")[0].header.Get("X-Api-Key"))
	require.Equal(t, "application/json", api.requests("/key")[0].header.Get("Accept"))
	require.NotEmpty(t, api.requests("/tls"))
	require.Empty(t, api.requests("/tls-noca"), "no TLS handshake completes without the CA")

	// Unknown profile: not polled, and says why.
	require.Empty(t, api.requests("/unknown"))
	out, err := pollworker(t, "sessions", "--redis-url", rds.URL(), "get", "unknown")
	require.NoError(t, err, out)
	require.Contains(t, out, "profile nope: not configured on worker w1 (its profiles: apikey, bearer, private-ca)")
	out, err = pollworker(t, "explain", "--redis-url", rds.URL(), "unknown")
	require.NoError(t, err, out)
	require.Contains(t, out, "last poll:  failed (profile)")
	require.Contains(t, out, "profile nope: not configured on worker w1")

	// The redirect loop: one request per poll, every poll a failure.
	loopResults := 0
	c := rds.Client(t)
	ctx := context.Background()
	entries, err := c.XRange(ctx, "poll:results", "-", "+").Result()
	require.NoError(t, err)
	for _, e := range entries {
		if e.Values["session"] == "loop" {
			loopResults++
			require.Contains(t, e.Values["error"], "redirect not followed: a loop")
		}
	}
	require.Positive(t, loopResults)
	require.LessOrEqual(t, len(api.requests("/loop")), loopResults+1, "one request per poll (+1 in flight)")

	// The log says when a session started failing, with its message.
	w.mu.Lock()
	logText := w.log.String()
	w.mu.Unlock()
	require.Contains(t, logText, `"msg":"session failing","worker":"w1","session":"s401"`)

	// No secret anywhere: every Redis key, the log, status, export.
	var dump strings.Builder
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	keys := 0
	for iter.Next(ctx) {
		keys++
		k := iter.Val()
		dump.WriteString(k + "\n")
		raw, err := c.Dump(ctx, k).Result()
		require.NoError(t, err, k)
		dump.WriteString(raw)
		dump.WriteString(readKey(t, c, k))
	}
	require.NoError(t, iter.Err())
	require.Positive(t, keys)
	status, err := pollworker(t, "status", "--redis-url", rds.URL(), "--json")
	require.NoError(t, err, status)
	export, err := pollworker(t, "sessions", "--redis-url", rds.URL(), "export")
	require.NoError(t, err, export)
	page, metrics := httpGet(t, w, "/"), httpGet(t, w, "/metrics")
	for _, s := range secrets {
		require.NotContains(t, page, s, "the status page")
		require.NotContains(t, metrics, s, "/metrics")
		require.NotContains(t, dump.String(), s, "Redis")
		require.NotContains(t, logText, s, "the worker's log")
		require.NotContains(t, status, s, "status --json")
		require.NotContains(t, export, s, "sessions export")
	}
}

// readKey returns every value of key k, whatever its type.
func readKey(t *testing.T, c *redis.Client, k string) string {
	t.Helper()
	ctx := context.Background()
	typ, err := c.Type(ctx, k).Result()
	require.NoError(t, err)
	var v any
	switch typ {
	case "string":
		v, err = c.Get(ctx, k).Result()
	case "hash":
		v, err = c.HGetAll(ctx, k).Result()
	case "list":
		v, err = c.LRange(ctx, k, 0, -1).Result()
	case "set":
		v, err = c.SMembers(ctx, k).Result()
	case "zset":
		v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
	case "stream":
		v, err = c.XRange(ctx, k, "-", "+").Result()
	}
	require.NoError(t, err, k)
	return fmt.Sprint(v)
}

// httpGet returns the body of path on the worker's HTTP server, whose
// address its log names ("health server listening").
func httpGet(t *testing.T, w *worker, path string) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		m := regexp.MustCompile(`"health server listening".*"http_addr":"([^"]+)"`).FindStringSubmatch(w.log.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 20*time.Millisecond, "the worker's HTTP address")
	resp, err := http.Get("http://" + addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	return string(body)
}
