package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// newTestClient returns a client for mr that neither retries nor redials.
func newTestClient(t *testing.T, mr *miniredis.Miniredis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// acquire takes the leases of ids for holder.
func acquire(t *testing.T, c *redis.Client, holder string, ids ...string) {
	t.Helper()
	m, err := lease.New(lease.Config{Client: c, Holder: holder, TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	for _, r := range m.Acquire(ctxT(t), ids) {
		require.NoError(t, r.Err)
		require.NotNil(t, r.Lease, r.Session)
	}
	t.Cleanup(func() { _ = m.ReleaseAll(context.Background()) })
}

func heartbeat(t *testing.T, c *redis.Client, id, version string) {
	t.Helper()
	reg, err := nodes.New(nodes.Config{Client: c, ID: id, Version: version})
	require.NoError(t, err)
	require.NoError(t, reg.Heartbeat(ctxT(t)))
}

func TestComputeStatus(t *testing.T) {
	mr, url := miniURL(t)
	c := newTestClient(t, mr)
	ctx := ctxT(t)
	store := newTestStore(t, mr)
	for i, id := range []string{"s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10", "p1", "p2"} {
		s := session.Session{ID: id, URL: "http://example.com/" + id, Interval: session.Duration(time.Second), Paused: i >= 10}
		require.NoError(t, store.Put(ctx, s))
	}
	mr.Set("session:junk", "not json")
	_, err := mr.SAdd(keyspace.Space{}.SessionBucketOf("junk"), "junk")
	require.NoError(t, err)

	heartbeat(t, c, "w1", "v1")
	heartbeat(t, c, "w2", "v1")
	heartbeat(t, c, "w3", "v2")
	acquire(t, c, "w1", "s01", "s02", "s03", "s04")
	acquire(t, c, "w2", "s05", "s06", "s07")
	acquire(t, c, "ghost", "s08") // crashed: no heartbeat, lease not expired yet
	acquire(t, c, "w3", "p1")     // paused sessions are not counted

	st, err := computeStatus(ctx, c, keyspace.Space{}, true)
	require.NoError(t, err)

	require.Len(t, st.Nodes, 3)
	for i, want := range []struct {
		id      string
		version string
		leases  int
	}{{"w1", "v1", 4}, {"w2", "v1", 3}, {"w3", "v2", 0}} {
		n := st.Nodes[i]
		require.Equal(t, want.id, n.ID)
		require.Equal(t, want.version, n.Version)
		require.Equal(t, want.leases, n.Leases, n.ID)
		require.NotEmpty(t, n.Host)
		require.NotZero(t, n.PID)
		require.False(t, n.Started.IsZero())
		require.Positive(t, n.ExpiresInMs)
	}
	require.Equal(t, sessionCounts{Total: 12, Active: 10, Paused: 2, Malformed: 1}, st.Sessions)
	require.Len(t, st.Malformed, 1)
	require.Equal(t, "junk", st.Malformed[0].ID)
	require.LessOrEqual(t, st.Leases.NotPlanned, st.Leases.ByLive)
	require.Equal(t, leaseCounts{Held: 8, ByLive: 7, ByOthers: 1, Unowned: 2, NotPolled: 3, NotPlanned: st.Leases.NotPlanned}, st.Leases)
	require.Equal(t, []string{"s09", "s10"}, st.UnownedSample)
	require.Len(t, st.OtherHolders, 1)
	require.Equal(t, "ghost", st.OtherHolders[0].ID)
	require.Equal(t, 1, st.OtherHolders[0].Leases)
	require.False(t, st.OtherHolders[0].Previous)
	require.Equal(t, []string{"s08"}, st.NotPolledSample)
	require.True(t, st.UnknownLeases.Scanned)
	require.Zero(t, st.UnknownLeases.Count)
	require.Equal(t, 4, st.Balance.Max)
	require.InDelta(t, 7.0/3, st.Balance.Mean, 1e-9)
	require.InDelta(t, 4/(7.0/3), st.Balance.MaxOverMean, 1e-9)

	var out bytes.Buffer
	printStatus(&out, st)
	for _, want := range []string{
		"live nodes: 3\n",
		"sessions: 12 total, 10 active, 2 paused, 1 malformed\n",
		"  malformed junk: session: malformed: not a JSON object\n",
		"leases: 8 of 10 active sessions (7 by live nodes, 0 by previous incarnations, 1 by other holders)\n",
		"  ghost (not live; leases expire by TTL, within 1m0s): 1\n",
		"unowned active sessions: 2 (s09, s10)\n",
		"NOT POLLED: 1 active sessions held by a holder that is not polling them (s08)\n",
		"leases of sessions not in the store: 0\n",
		"balance: max 4, mean 2.33 leases per live node (max/mean 1.71)\n",
	} {
		require.Contains(t, out.String(), want)
	}

	// The command prints the same, and JSON on request.
	r := runApp(t, "status", "--redis-url", url)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "balance: max 4, mean 2.33 leases per live node (max/mean 1.71)\n")
	r = runApp(t, "status", "--redis-url", url, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var decoded map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &decoded))
	require.Equal(t, map[string]any{"held": 8.0, "by_live_nodes": 7.0, "by_previous_incarnations": 0.0, "by_other_holders": 1.0,
		"unowned": 2.0, "not_polled": 3.0, "not_planned": float64(st.Leases.NotPlanned)}, decoded["leases"])
}

func TestComputeStatusUnownedSampleIsBounded(t *testing.T) {
	mr, _ := miniURL(t)
	c := newTestClient(t, mr)
	store := newTestStore(t, mr)
	for i := range 25 {
		s := session.Session{ID: "s" + string(rune('a'+i)), URL: "http://example.com/", Interval: session.Duration(time.Second)}
		require.NoError(t, store.Put(ctxT(t), s))
	}
	st, err := computeStatus(ctxT(t), c, keyspace.Space{}, true)
	require.NoError(t, err)
	require.Equal(t, 25, st.Leases.Unowned)
	require.Len(t, st.UnownedSample, maxUnownedShown)
	require.Empty(t, st.Nodes)
	require.Equal(t, balance{}, st.Balance)

	var out bytes.Buffer
	printStatus(&out, st)
	require.Contains(t, out.String(), "unowned active sessions: 25 (sa, sb, sc, sd, se, sf, sg, sh, si, sj, and 15 more)\n")
	require.NotContains(t, out.String(), "balance")
}

func TestComputeStatusEmpty(t *testing.T) {
	mr, url := miniURL(t)
	st, err := computeStatus(ctxT(t), newTestClient(t, mr), keyspace.Space{}, true)
	require.NoError(t, err)
	require.Empty(t, st.Nodes)
	require.Equal(t, sessionCounts{}, st.Sessions)
	require.Equal(t, leaseCounts{}, st.Leases)

	r := runApp(t, "status", "--redis-url", url)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "live nodes: 0\nsessions: 0 total, 0 active, 0 paused, 0 malformed\n"+
		"leases: 0 of 0 active sessions (0 by live nodes, 0 by previous incarnations, 0 by other holders)\nunowned active sessions: 0\n"+
		"leases of sessions not in the store: 0\n", r.stdout)
}

// TestStatusStandsWithoutTheScan: a SCAN for unknown leases that fails
// (it timed out under a fleet of 4 taking 100k sessions) is reported as
// not done, with its error, and the rest of the status stands; it failed
// the whole status before.
func TestStatusStandsWithoutTheScan(t *testing.T) {
	mr, _ := miniURL(t)
	c := newTestClient(t, mr)
	r, err := fleet.NewReader(c, keyspace.Space{}, fleetOptions(poller.DefaultLeaseTTL))
	require.NoError(t, err)
	snap, err := r.ReadAll(ctxT(t))
	require.NoError(t, err)
	mr.Close() // the SCAN fails

	u := findUnknownLeases(ctxT(t), r, snap)
	require.False(t, u.Scanned)
	require.Contains(t, u.Skipped, "the scan failed: fleet: scan for leases:")
	var out strings.Builder
	st := buildStatus(snap)
	st.UnknownLeases = u
	printStatus(&out, st)
	require.Contains(t, out.String(), "leases of sessions not in the store: not looked for (the scan failed: fleet: scan for leases:")
}

func TestWatchRedrawsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var buf syncBuffer
	draws := 0
	done := make(chan error, 1)
	go func() {
		done <- watch(ctx, &buf, time.Millisecond, time.Second, true, func(context.Context, io.Writer) error {
			draws++
			if draws == 3 {
				cancel()
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
	require.Equal(t, 3, draws)
	require.Equal(t, 2, strings.Count(buf.String(), "\x1b[H\x1b[2J"), "the frame of the cancelled refresh is not drawn")
}

// screen is what a terminal shows of watch's output: what follows the last
// clear.
func screen(out string) string {
	i := strings.LastIndex(out, clearScreen)
	if i < 0 {
		return ""
	}
	return out[i+len(clearScreen):]
}

// TestWatchKeepsLastErrorOnScreen (issue 10, item 11): while Redis is down
// `status --watch` showed a blank screen: it cleared the screen before a
// refresh that then waited on Redis. The screen must keep the last error,
// with its time, during the next refresh, and the last good frame under it.
func TestWatchKeepsLastErrorOnScreen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var buf syncBuffer
	inThird := make(chan struct{})
	release := make(chan struct{})
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- watch(ctx, &buf, time.Millisecond, time.Minute, true, func(ctx context.Context, w io.Writer) error {
			calls++
			switch calls {
			case 1:
				fmt.Fprintln(w, "live nodes: 2")
				return nil
			case 2:
				return errors.New("status: dial tcp 127.0.0.1:6379: connect: connection refused")
			}
			close(inThird)
			<-release // a refresh that waits on an unreachable Redis
			cancel()
			return ctx.Err()
		})
	}()
	select {
	case <-inThird:
	case <-time.After(10 * time.Second):
		t.Fatal("no third refresh")
	}
	shown := screen(buf.String())
	require.Contains(t, shown, "ERROR at ")
	require.Contains(t, shown, "connect: connection refused")
	require.Regexp(t, `failing since \d\d:\d\d:\d\d`, shown)
	require.Contains(t, shown, "last successful refresh, at ")
	require.Contains(t, shown, "live nodes: 2")
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
}

// TestStatusShowsPreviousIncarnationAndUnknownLeases (issue 10, item 7):
// after a kill -9 and an immediate restart under the same id, status showed
// the new w1 holding the dead process's leases and "unowned active
// sessions: 0" while 11 sessions went unpolled; and leases of sessions no
// longer in the store were invisible. Status must tell a lease of a
// previous incarnation from the live one's, list the sessions nobody polls,
// and find leases of unknown sessions.
func TestStatusShowsPreviousIncarnationAndUnknownLeases(t *testing.T) {
	mr, url := miniURL(t)
	c := newTestClient(t, mr)
	ctx := ctxT(t)
	store := newTestStore(t, mr)
	for _, id := range []string{"s01", "s02", "s03", "s04", "s05", "s06"} {
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://example.com/", Interval: session.Duration(time.Second)}))
	}
	// w1 was killed while holding s01-s03 (and the leases of gone1 and
	// gone2, since removed from the store), and restarted at once.
	dead, err := lease.New(lease.Config{Client: c, Holder: "w1", Incarnation: "0dead", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	for _, r := range dead.Acquire(ctx, []string{"s01", "s02", "s03", "gone1", "gone2"}) {
		require.NotNil(t, r.Lease)
	}
	reg, err := nodes.New(nodes.Config{Client: c, ID: "w1", Incarnation: "1a11ve"})
	require.NoError(t, err)
	require.NoError(t, reg.Heartbeat(ctx))
	live, err := lease.New(lease.Config{Client: c, Holder: "w1", Incarnation: reg.Incarnation(), TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	require.NotNil(t, live.Acquire(ctx, []string{"s04"})[0].Lease)
	heartbeat(t, c, "w2", "v1")
	acquire(t, c, "w2", "s05") // owner value without incarnation: counted as live

	st, err := computeStatus(ctx, c, keyspace.Space{}, true)
	require.NoError(t, err)
	require.Len(t, st.Nodes, 2)
	require.Equal(t, "1a11ve", st.Nodes[0].Incarnation)
	require.Equal(t, 1, st.Nodes[0].Leases, "only the live incarnation's lease")
	require.GreaterOrEqual(t, st.Nodes[0].HeartbeatAgeMs, int64(0))
	require.LessOrEqual(t, st.Leases.NotPlanned, st.Leases.ByLive)
	require.Equal(t, leaseCounts{Held: 5, ByLive: 2, ByPrevious: 3, Unowned: 1, NotPolled: 4, NotPlanned: st.Leases.NotPlanned}, st.Leases)
	require.Equal(t, []string{"s01", "s02", "s03"}, st.NotPolledSample)
	require.Equal(t, []string{"s06"}, st.UnownedSample)
	require.Len(t, st.OtherHolders, 1)
	require.Equal(t, holderCount{ID: "w1", Incarnation: "0dead", Previous: true, Leases: 3, ExpiresInMs: st.OtherHolders[0].ExpiresInMs}, st.OtherHolders[0])
	require.Positive(t, st.OtherHolders[0].ExpiresInMs)
	require.True(t, st.UnknownLeases.Scanned)
	require.Equal(t, 2, st.UnknownLeases.Count)
	require.Equal(t, "gone1", st.UnknownLeases.Lease[0].Session)
	require.Equal(t, "w1", st.UnknownLeases.Lease[0].Holder)
	require.Equal(t, "0dead", st.UnknownLeases.Lease[0].Incarnation)

	var out bytes.Buffer
	printStatus(&out, st)
	for _, want := range []string{
		"leases: 5 of 6 active sessions (2 by live nodes, 3 by previous incarnations, 0 by other holders)\n",
		"  w1 incarnation 0dead (previous incarnation of a live id, not polling; leases expire by TTL, within ",
		"unowned active sessions: 1 (s06)\n",
		"NOT POLLED: 3 active sessions held by a holder that is not polling them (s01, s02, s03)\n",
		"leases of sessions not in the store: 2 (gone1 by w1, gone2 by w1)\n",
		"1a11ve",
	} {
		require.Contains(t, out.String(), want)
	}

	r := runApp(t, "status", "--redis-url", url, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var decoded struct {
		Leases        map[string]int `json:"leases"`
		NotPolled     []string       `json:"not_polled_sample"`
		UnknownLeases struct {
			Count  int `json:"count"`
			Sample []struct {
				Session string `json:"session"`
			} `json:"sample"`
		} `json:"unknown_leases"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &decoded))
	require.Equal(t, 3, decoded.Leases["by_previous_incarnations"])
	require.Equal(t, 4, decoded.Leases["not_polled"])
	require.Equal(t, []string{"s01", "s02", "s03"}, decoded.NotPolled)
	require.Equal(t, 2, decoded.UnknownLeases.Count)

	r = runApp(t, "status", "--redis-url", url, "--scan-leases=false")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "not in the store")

	// The status page shows the same.
	page := statusPageHandler("w1", func() bool { return true }, (&pageReader{client: c, keys: keyspace.Space{}}).read, newRecentEvents(1))
	w := httptest.NewRecorder()
	page.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	body := w.Body.String()
	require.Contains(t, body, `<b id="not-polled" class="err">3 by previous incarnations, 0 by workers not live</b> s01 s02 s03`)
	require.Contains(t, body, "<td>w1</td><td>0dead</td><td>previous incarnation of a live id</td><td>3</td>")
	require.Contains(t, body, `<b id="unknown-leases">2</b> gone1 by w1 gone2 by w1`)
	require.Contains(t, body, "<td>1a11ve</td>")
}

// TestStatusUsesThePlanner: status places the sessions with the workers'
// own planner (package assign): each node's planned share, and the leases
// held by a live worker the planner does not place them on.
func TestStatusUsesThePlanner(t *testing.T) {
	m := nodes.Membership{Nodes: []string{"w1", "w2", "w3"}, ExpiryMs: []int64{1, 1, 1}}
	var sessions []session.Session
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("p%02d", i)
		ids = append(ids, id)
		sessions = append(sessions, session.Session{ID: id, URL: "http://x/", Interval: session.Duration(time.Second)})
	}
	plain := snapshotOf(t, m, nil, sessions, nil)
	planned := make([]string, len(ids))
	for i, id := range ids {
		planned[i] = plain.OwnerOf(id)
	}
	holdings := make([]lease.Holding, len(ids))
	for i, id := range ids {
		holdings[i] = lease.Holding{Session: id, Owner: planned[i] + "#0123456789abcdef", Remaining: time.Second}
	}
	st := buildStatus(snapshotOf(t, m, nil, sessions, holdings))
	total := 0
	for _, n := range st.Nodes {
		require.Equal(t, n.Leases, n.Planned, "%s holds its planned share", n.ID)
		total += n.Planned
	}
	require.Equal(t, 30, total)
	require.Zero(t, st.Leases.NotPlanned)

	// One session held by another live worker than the planned one.
	other := "w1"
	if planned[0] == "w1" {
		other = "w2"
	}
	holdings[0].Owner = other + "#0123456789abcdef"
	st = buildStatus(snapshotOf(t, m, nil, sessions, holdings))
	require.Equal(t, 1, st.Leases.NotPlanned)
	var out strings.Builder
	printStatus(&out, st)
	require.Contains(t, out.String(), "held off their planned worker: 1")
}

// snapshotOf is what fleet.Reader.ReadAll would read for membership m,
// the infos, an index holding sessions and these leases.
func snapshotOf(t *testing.T, m nodes.Membership, infos []nodes.Info, sessions []session.Session, holdings []lease.Holding) *fleet.Snapshot {
	t.Helper()
	sizes := make([]int, keyspace.SessionBuckets)
	for _, s := range sessions {
		sizes[keyspace.BucketOf(s.ID)]++
	}
	leases := make(map[string]lease.Holding, len(holdings))
	for _, h := range holdings {
		leases[h.Session] = h
	}
	snap, err := fleet.Build(fleet.Observed{Members: m, Infos: infos, Weights: session.Weights{Sizes: sizes}, Sessions: sessions, Leases: leases},
		fleetOptions(poller.DefaultLeaseTTL))
	require.NoError(t, err)
	return snap
}

// TestStatusUnplaceable: an active session whose selector no live
// worker's labels match is counted and shown, per selector; one that a
// worker matches, or a paused one, is not; a lease held by its planned
// owner among the matching workers is not "off its planned worker".
func TestStatusUnplaceable(t *testing.T) {
	m := nodes.Membership{Version: 1, Nodes: []string{"w1", "w2"}, ExpiryMs: []int64{10_000, 10_000}, ServerTimeMs: 1}
	sel := func(id, s string, paused bool) session.Session {
		return session.Session{ID: id, URL: "http://x/", Interval: session.Duration(time.Second), Selector: s, Paused: paused}
	}
	sessions := []session.Session{sel("a", "zone=eu", false), sel("b", "zone=mars", false), sel("c", "zone=mars", true), sel("d", "", false)}
	st := buildStatus(snapshotOf(t, m, []nodes.Info{{ID: "w1", Labels: nodes.Labels{"zone": "eu"}}, {ID: "w2"}}, sessions,
		[]lease.Holding{{Session: "a", Owner: "w1#0123456789abcdef"}}))
	require.Equal(t, 1, st.Unplaceable.Count)
	require.Equal(t, map[string]int{"zone=mars": 1}, st.Unplaceable.BySelector)
	require.Equal(t, []string{"b"}, st.Unplaceable.Sample)
	require.Zero(t, st.Leases.NotPlanned, "a is planned on w1, the only eu worker")
	require.Equal(t, map[string]string{"zone": "eu"}, st.Nodes[0].Labels)
	var out strings.Builder
	printStatus(&out, st)
	require.Contains(t, out.String(), "UNPLACEABLE: 1 active sessions whose selector no live worker's labels match, polled by nobody (zone=mars: 1) (b)")
	require.Contains(t, out.String(), "zone=eu")
}

// TestPollBalanceByLabels: with workers of more than one set of labels,
// status gives the poll balance within each set (per unit of weight,
// cordoned workers left out), beside the fleet's; with one set, none.
func TestPollBalanceByLabels(t *testing.T) {
	eu := map[string]string{"zone": "eu"}
	us := map[string]string{"zone": "us", "egress": "static"}
	n := func(labels map[string]string, rate, weight float64, cordoned bool) nodeStatus {
		return nodeStatus{Labels: labels, PollsPerSecond: rate, Weight: weight, Cordoned: cordoned}
	}
	for _, tc := range []struct {
		name    string
		give    []nodeStatus
		fleet   float64
		byLabel []labelBalance
		printed string
	}{
		{name: "one set", give: []nodeStatus{n(eu, 100, 1, false), n(eu, 50, 1, false)}, fleet: 100 / 75.0},
		{name: "no labels at all", give: []nodeStatus{n(nil, 10, 1, false), n(nil, 10, 1, false)}, fleet: 1},
		{
			name: "two zones, each even, the fleet not",
			give: []nodeStatus{n(eu, 300, 1, false), n(eu, 300, 1, false), n(us, 100, 1, false), n(us, 200, 2, false)},
			// 900 polls/s over weight 5: mean 180; the eu workers' 300 is the worst.
			fleet: 300 / 180.0,
			byLabel: []labelBalance{
				{Labels: "egress=static,zone=us", Workers: 2, PollBalance: 1},
				{Labels: "zone=eu", Workers: 2, PollBalance: 1},
			},
			printed: "poll balance by worker labels: egress=static,zone=us 1.00 (2 workers); zone=eu 1.00 (2 workers)",
		},
		{
			name:  "unlabelled workers are a set; cordoned ones are left out",
			give:  []nodeStatus{n(eu, 100, 1, false), n(eu, 0, 1, true), n(nil, 150, 1, false), n(nil, 50, 1, false)},
			fleet: 150 / 100.0,
			byLabel: []labelBalance{
				{Labels: "", Workers: 2, PollBalance: 1.5},
				{Labels: "zone=eu", Workers: 1, PollBalance: 1},
			},
			printed: "poll balance by worker labels: (no labels) 1.50 (2 workers); zone=eu 1.00 (1 worker)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.fleet, pollBalance(tc.give), 1e-9)
			got := pollBalanceByLabels(tc.give)
			require.Equal(t, tc.byLabel, got)
			var out strings.Builder
			printStatus(&out, clusterStatus{Nodes: tc.give, PollBalance: tc.fleet, PollBalanceByLabels: got})
			if tc.printed == "" {
				require.NotContains(t, out.String(), "by worker labels")
			} else {
				require.Contains(t, out.String(), tc.printed)
			}
		})
	}
}

// TestWatchIntoPipeHasNoANSI: status --watch writes ANSI codes only to a
// terminal; into a pipe or a file each frame follows the last (issue 22:
// `status --watch | tee` got escape codes).
func TestWatchIntoPipeHasNoANSI(t *testing.T) {
	_, url := miniURL(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"pollworker", "status", "--redis-url", url, "--watch", "100ms"}, &stdout, &stderr, nil)
	}()
	require.Eventually(t, func() bool { return strings.Count(stdout.String(), "pollworker status, every") >= 2 },
		20*time.Second, 10*time.Millisecond)
	cancel()
	require.Equal(t, exitOK, <-done, stderr.String())
	require.NotContains(t, stdout.String(), "\x1b")
	require.Contains(t, stdout.String(), "\n\npollworker status, every 100ms", "frames are separated by a blank line")

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminal(w))
	require.False(t, isTerminal(&stdout))
}

// TestPrintStatusSaysWhoIsBehind: a worker whose heartbeat says it is
// behind gets a line saying why.
func TestPrintStatusSaysWhoIsBehind(t *testing.T) {
	var out bytes.Buffer
	printStatus(&out, clusterStatus{Nodes: []nodeStatus{{ID: "w1", HeartbeatAgeMs: -1, Weight: 1,
		Behind: "host-limit (host t:80): runs 10 of 20 polls/s due"}, {ID: "w2", HeartbeatAgeMs: -1, Weight: 1}}})
	require.Contains(t, out.String(), "  w1 is behind (at its last heartbeat): host-limit (host t:80): runs 10 of 20 polls/s due\n")
	require.NotContains(t, out.String(), "w2 is behind")
}

// TestStatusShowsWorkersReadingOtherSessions: a live worker whose
// heartbeat says it reads another session prefix is listed, and planned
// nothing (every session planned on w1).
func TestStatusShowsWorkersReadingOtherSessions(t *testing.T) {
	mr, _ := miniURL(t)
	c := newTestClient(t, mr)
	ctx := ctxT(t)
	store := newTestStore(t, mr)
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://example.com/" + id, Interval: session.Duration(time.Second)}))
	}
	heartbeat(t, c, "w1", "v1")
	typo, err := nodes.New(nodes.Config{Client: c, ID: "typo", Keys: keyspace.Space{SessionPrefix: "sesion"}})
	require.NoError(t, err)
	require.NoError(t, typo.Heartbeat(ctx))
	acquire(t, c, "w1", "s1", "s2", "s3", "s4", "s5", "s6")

	st, err := computeStatus(ctx, c, keyspace.Space{}, false)
	require.NoError(t, err)
	require.Len(t, st.Nodes, 2)
	require.Equal(t, "typo", st.Nodes[0].ID)
	require.Equal(t, "sesion", st.Nodes[0].OtherSessions)
	require.Empty(t, st.Nodes[1].OtherSessions)
	require.Zero(t, st.Leases.NotPlanned, "every session is planned on w1")
	require.InDelta(t, 1.0, st.Balance.MaxOverMean, 1e-9, "typo counts in no balance")
	require.InDelta(t, 1.0, pollBalance([]nodeStatus{{ID: "w1", Weight: 1, PollsPerSecond: 100}, {ID: "typo", Weight: 1, OtherSessions: "sesion"}}), 1e-9,
		"left out of the poll balance, as a cordoned worker is")
	var out strings.Builder
	printStatus(&out, st)
	require.Contains(t, out.String(), "OTHER SESSION PREFIX (take no sessions: they read other sessions; every worker under one --key-prefix needs the same --session-prefix): typo (sesion)\n")
}

// TestStatusPollRateCountsSchedules: a worker's POLLS/S counts its
// scheduled sessions' slots as well as its interval sessions (it read
// 0.00 for a worker polling 15 sessions on a schedule every second).
func TestStatusPollRateCountsSchedules(t *testing.T) {
	m := nodes.Membership{Nodes: []string{"w1"}, ExpiryMs: []int64{1}}
	sessions := []session.Session{
		{ID: "iv", URL: "http://x/", Interval: session.Duration(500 * time.Millisecond)},
		{ID: "cron", URL: "http://x/", Schedule: "* * * * * *"},
		{ID: "daily", URL: "http://x/", Schedule: "@daily"},
	}
	var holdings []lease.Holding
	for _, s := range sessions {
		holdings = append(holdings, lease.Holding{Session: s.ID, Owner: "w1#0123456789abcdef", Remaining: time.Second})
	}
	st := buildStatus(snapshotOf(t, m, nil, sessions, holdings))
	require.Len(t, st.Nodes, 1)
	require.InDelta(t, 2+1+1.0/86400, st.Nodes[0].PollsPerSecond, 1e-9)
}
