package main

import (
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/internal/timeline"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
)

// startRunWorker runs `pollworker run` in-process with an HTTP server on a
// free port and returns the server's address.
func startRunWorker(t *testing.T, url, id string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	var stdout, stderr syncBuffer
	exited := make(chan struct{})
	args := append([]string{"pollworker", "run", "--redis-url", url, "--id", id}, fastTimings...)
	go func() { run(ctx, args, &stdout, &stderr, nil); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	var addr string
	require.Eventually(t, func() bool { addr = httpAddrIn(stderr.String()); return addr != "" }, 10*time.Second, 10*time.Millisecond)
	return addr
}

func TestRecentEventsKeepsNewestFirst(t *testing.T) {
	for _, tc := range []struct {
		max  int
		adds string
		want string // sessions listed, newest first
	}{
		{2, "", ""},
		{2, "a", "a"},
		{2, "abc", "cb"},
		{3, "abcdefgh", "hgf"}, // wrapped more than once
		{1, "ab", "b"},
		{0, "ab", ""},
	} {
		r := newRecentEvents(tc.max)
		for _, s := range tc.adds {
			r.add(poller.Event{Type: poller.EventAcquired, Session: string(s)})
		}
		got := ""
		for _, e := range r.list() {
			got += e.Session
		}
		require.Equal(t, tc.want, got, "max %d, adds %q", tc.max, tc.adds)
	}
}

func TestStatusPageServesLiveNodes(t *testing.T) {
	srv := redistest.Start(t)
	addSession(t, srv.Client(t), "s1", "http://127.0.0.1:1/")
	addr := startRunWorker(t, srv.URL(), "page-w1")
	startRunWorker(t, srv.URL(), "page-w2")
	require.Eventually(t, func() bool {
		code, body := get("http://" + addr + "/")
		return code == 200 && strings.Contains(body, "<td>page-w1</td>") && strings.Contains(body, "<td>page-w2</td>") &&
			strings.Contains(body, `id="unowned">0<`)
	}, 10*time.Second, 20*time.Millisecond)
	// A cordoned worker is marked on the page.
	r := runApp(t, "drain", "--redis-url", srv.URL(), "page-w2")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Eventually(t, func() bool {
		_, body := get("http://" + addr + "/")
		return strings.Contains(body, `<td>page-w2 <b class="err cordoned">cordoned</b></td>`) && strings.Contains(body, "<td>page-w1</td>")
	}, 10*time.Second, 20*time.Millisecond)
	code, _ := get("http://" + addr + "/nope")
	require.Equal(t, 404, code)
}

// TestStatusPageInHeadlessChromium renders the page in a real browser.
// `make test` installs Chromium when it can; without it the test is skipped
// (and fails under CI, which must run it).
func TestStatusPageInHeadlessChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		msg := "chromium not found: `make test` as root installs it (apt-get install chromium)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	srv := redistest.Start(t)
	addSession(t, srv.Client(t), "s1", "http://127.0.0.1:1/")
	addr := startRunWorker(t, srv.URL(), "chrome-w1")
	startRunWorker(t, srv.URL(), "chrome-w2")
	// Both workers on the page, each with the first point of its timeline
	// (written a second after it starts) on the charts.
	require.Eventually(t, func() bool {
		_, body := get("http://" + addr + "/")
		return strings.Contains(body, "<td>chrome-w2</td>") && strings.Contains(body, "<td>chrome-w1</td>") &&
			strings.Contains(body, `data-name="chrome-w1"`) && strings.Contains(body, `data-name="chrome-w2"`)
	}, 20*time.Second, 50*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chrome := func(args ...string) []byte {
		t.Helper()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
			"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir()}, args...)
		out, err := exec.CommandContext(ctx, browser, append(args, "http://"+addr+"/")...).Output()
		require.NoError(t, err)
		return out
	}
	dom := string(chrome("--dump-dom"))
	require.Contains(t, dom, `<b id="self">chrome-w1</b>`)
	require.Contains(t, dom, "<td>chrome-w1</td>")
	require.Contains(t, dom, "<td>chrome-w2</td>")
	require.Contains(t, dom, `<span id="ready">ready</span>`)
	require.Contains(t, dom, `<div id="charts"`)
	require.Equal(t, 5, strings.Count(dom, `<svg role="img"`), "four timelines and the placement bars")

	// A screenshot, for a person to look at: its path is in the test's
	// output (-v), in POLLWORKER_SCREENSHOT_DIR when set.
	dir := os.Getenv("POLLWORKER_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "statuspage.png")
	chrome("--window-size=1280,1600", "--screenshot="+shot)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, 1280, img.Bounds().Dx())
	t.Logf("status page screenshot: %s", shot)
}

// TestStatusPageChartsTheFleetsTimelines: the charts draw every live
// worker's timeline as the workers wrote it (internal/timeline), skip what
// does not decode, and show placement as held against planned.
func TestStatusPageChartsTheFleetsTimelines(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	keys := keyspace.Space{}
	now := time.Now()
	for i, id := range []string{"w1", "w2", "w3"} {
		for k := 90; k >= 0; k-- {
			p := timeline.Rate(timeline.Counters{}, timeline.Counters{Polls: uint64(100 * (i + 1)), Failures: uint64(10 * i), Held: 10 * (i + 1)},
				now.Add(-time.Duration(k+1)*10*time.Second), now.Add(-time.Duration(k)*10*time.Second))
			b, err := json.Marshal(p)
			require.NoError(t, err)
			require.NoError(t, c.LPush(context.Background(), keys.Timeline(id), b).Err())
		}
	}
	require.NoError(t, c.LPush(context.Background(), keys.Timeline("w3"), "{not json").Err())
	st := clusterStatus{PlanUnit: "polls/day", Nodes: []nodeStatus{
		{ID: "w1", PollsPerSecond: 10, Planned: 864000}, {ID: "w2", PollsPerSecond: 5, Planned: 432000}, {ID: "w3"}}}
	pc, err := readCharts(context.Background(), c, keys, st, now)
	require.NoError(t, err)
	require.Equal(t, 1, pc.Skipped)
	for name, chart := range map[string]string{"polls": string(pc.Polls), "failures": string(pc.Failures), "held": string(pc.Held)} {
		for _, id := range []string{"w1", "w2", "w3"} {
			require.Contains(t, chart, `data-name="`+id+`"`, "%s chart, %s", name, id)
		}
	}
	require.Contains(t, string(pc.Polls), ">30<", "the axis tops at w3's 30 polls/s")
	require.Contains(t, string(pc.Placement), "10 / 10 polls/s")
	require.Contains(t, string(pc.Placement), "5 / 5 polls/s")
}

// TestReadyzFollowsRedis: /readyz turns 503 soon after Redis stops (the
// worker fails closed) and 200 again once Redis is back.
func TestReadyzFollowsRedis(t *testing.T) {
	srv := redistest.Start(t)
	addr := startRunWorker(t, srv.URL(), "ready-w")
	ready := func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 }
	require.Eventually(t, ready, 10*time.Second, 10*time.Millisecond)

	srv.Stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return !ready() }, 10*time.Second, 10*time.Millisecond)
	t.Logf("/readyz went 503 %v after Redis stopped (renew interval 300ms, heartbeat 100ms)", time.Since(stopped).Round(time.Millisecond))

	srv.Restart()
	require.Eventually(t, ready, 10*time.Second, 10*time.Millisecond)
}

// TestStatusPageNotReadyAboveRedisError (issue 10, item 11): the page said
// "ready" right above a red "connection refused"; a page whose read of
// Redis failed shows the worker not ready.
func TestStatusPageNotReadyAboveRedisError(t *testing.T) {
	tests := []struct {
		name      string
		ready     bool
		readErr   error
		wantReady bool
		wantCode  int
	}{
		{name: "ready", ready: true, wantReady: true, wantCode: http.StatusOK},
		{name: "redis refused", ready: true, readErr: errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), wantCode: http.StatusServiceUnavailable},
		{name: "coordinator not ready", wantCode: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := statusPageHandler("w1", func() bool { return tt.ready }, func(context.Context) (clusterStatus, error) {
				return clusterStatus{}, tt.readErr
			}, newRecentEvents(1))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			require.Equal(t, tt.wantCode, w.Code)
			body := w.Body.String()
			if tt.wantReady {
				require.Contains(t, body, `<span id="ready">ready</span>`)
			} else {
				require.Contains(t, body, `<span id="ready" class="err">not ready</span>`)
			}
			if tt.readErr != nil {
				require.Contains(t, body, "connection refused")
			}
		})
	}
}

// TestStatusPageSaysBehind: a worker that is behind is shown ready and
// behind.
func TestStatusPageSaysBehind(t *testing.T) {
	for _, behind := range []bool{false, true} {
		h := statusPageConfig{self: "w1", ready: func() bool { return true }, events: newRecentEvents(1),
			read: func(context.Context) (clusterStatus, error) { return clusterStatus{}, nil },
			behind: func() string {
				if behind {
					return "cpu: runs 10 of 20 polls/s due"
				}
				return ""
			}}.handler()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		require.Contains(t, w.Body.String(), `<span id="ready">ready</span>`)
		if behind {
			require.Contains(t, w.Body.String(), `<span id="behind" class="err">behind: it cannot keep up with its share: cpu: runs 10 of 20 polls/s due</span>`)
		} else {
			require.NotContains(t, w.Body.String(), `id="behind"`)
		}
	}
}

// TestReadyzFollowsRedisWithinASecond (issue 10, item 11): /readyz stayed
// 200 for up to a renew interval after Redis stopped. With 5s intervals it
// must turn 503 within about a second (the cached PING), not 5s.
func TestReadyzFollowsRedisWithinASecond(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	var stdout, stderr syncBuffer
	exited := make(chan struct{})
	args := []string{"pollworker", "run", "--redis-url", srv.URL(), "--id", "slow-w", "--lease-ttl", "15s",
		"--renew-interval", "5s", "--heartbeat-interval", "5s", "--discovery-interval", "5s", "--drain-timeout", "1s",
		"--http-addr", "127.0.0.1:0"}
	go func() { run(ctx, args, &stdout, &stderr, nil); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	var addr string
	require.Eventually(t, func() bool { addr = httpAddrIn(stderr.String()); return addr != "" }, 10*time.Second, 10*time.Millisecond)
	ready := func() bool { code, _ := get("http://" + addr + "/readyz"); return code == http.StatusOK }
	require.Eventually(t, ready, 10*time.Second, 10*time.Millisecond, stderr.String())

	srv.Stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return !ready() }, 2500*time.Millisecond, 10*time.Millisecond)
	t.Logf("/readyz went 503 %v after Redis stopped (renew and heartbeat intervals 5s)", time.Since(stopped).Round(time.Millisecond))
	code, body := get("http://" + addr + "/")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, `class="err">not ready</span>`)
}

// TestStatusPageReusesTheCensus: the page reads the live workers on every
// load, but the sessions and their leases (every one of them) at most
// once per pageCensusEvery.
func TestStatusPageReusesTheCensus(t *testing.T) {
	mr := miniredis.RunT(t)
	c := newTestClient(t, mr)
	addSession(t, c, "s1", "http://127.0.0.1:1/")
	now := time.Unix(1_000_000, 0)
	p := &pageReader{client: c, keys: keyspace.Space{}, now: func() time.Time { return now }}
	st, err := p.read(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 1, st.Sessions.Active)
	require.Empty(t, st.Nodes)

	addSession(t, c, "s2", "http://127.0.0.1:1/")
	reg, err := nodes.New(nodes.Config{Client: c, ID: "w9", TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, reg.Heartbeat(ctxT(t)))
	now = now.Add(pageCensusEvery - time.Millisecond)
	st, err = p.read(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 1, st.Sessions.Active, "the census is reused")
	require.Len(t, st.Nodes, 1, "the live workers are read on every load")
	require.Equal(t, "w9", st.Nodes[0].ID)

	now = now.Add(time.Millisecond)
	st, err = p.read(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 2, st.Sessions.Active, "a census once per pageCensusEvery")
}
