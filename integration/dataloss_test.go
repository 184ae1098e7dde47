package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// Timings of TestSessionsLostWithRedisDataStop (issue 10 item 1): the
// acceptance bound on the last poll after a loss is one discovery interval
// plus one lease TTL; lossSlack covers a poll already on its way and
// process scheduling under -race on a loaded machine.
const (
	lossSessions = 30
	lossSlack    = 750 * time.Millisecond
	// lossWatch is how long past the bound the test keeps watching for a
	// poll, after which no stale lease or stopped loop could still fire.
	lossWatch = 1500 * time.Millisecond
)

var lossFlags = []string{
	"--lease-ttl", leaseTTL.String(), "--renew-interval", renewInterval.String(),
	"--heartbeat-interval", "1s", "--discovery-interval", discoveryInterval.String(),
}

// lossWorker is a pollworker run process with its HTTP server on loopback.
type lossWorker struct {
	*worker
	base string // http://127.0.0.1:port
}

// TestSessionsLostWithRedisDataStop is issue 10 item 1's acceptance run
// against the real binary: three workers poll 30 sessions (every 200 ms to
// 1 s); then Redis loses its data (FLUSHALL, or a restart of redis-server
// without persistence) and nobody puts the sessions back. No poll may start
// later than one discovery interval + one lease TTL (+ lossSlack) after
// the loss; then `pollworker status --json` and every worker's /metrics
// must agree with Redis: no session, no lease (KEYS poll:lease:* empty).
// Before the fix (commit 45bc2e4) most of the deleted sessions were polled
// for ever under leases re-created with tokens from 1, and a worker's
// pollworker_leases_held kept counting them.
func TestSessionsLostWithRedisDataStop(t *testing.T) {
	redistest.Require(t)
	for _, loss := range []string{"flushall", "restart-no-persistence"} {
		t.Run(loss, func(t *testing.T) {
			rds := startRedis(t)
			admin := redistest.Client(t, rds.URL())
			rec := newRecorder(t, nil, 10*time.Millisecond, false)
			ids := addLossSessions(t, admin, rec.URL)

			var ws []lossWorker
			for _, id := range []string{"w1", "w2", "w3"} {
				addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
				w := startWorker(t, rds.URL(), id, append(append([]string(nil), lossFlags...), "--http-addr", addr)...)
				ws = append(ws, lossWorker{worker: w, base: "http://" + addr})
			}

			// Steady state: every session polled, and the workers' gauges
			// count every lease.
			t0 := time.Now()
			require.Eventually(t, func() bool { return len(rec.polledSince(t0, nil)) == len(ids) }, 20*time.Second, 20*time.Millisecond,
				"every session polled")
			require.Eventually(t, func() bool {
				held := 0
				for _, w := range ws {
					m, err := w.metrics()
					if err != nil {
						return false
					}
					held += int(m[`pollworker_leases_held`])
				}
				return held == len(ids)
			}, 10*time.Second, 50*time.Millisecond, "the workers' pollworker_leases_held add up to %d", len(ids))

			lost := time.Now()
			switch loss {
			case "flushall":
				require.NoError(t, admin.FlushAll(context.Background()).Err())
			case "restart-no-persistence":
				rds.Restart() // SIGKILL of our redis-server, started again empty
			}
			// The bound counts from when Redis answers again, empty: for a
			// restart, the workers cannot reread anything before that.
			event := time.Now()
			bound := event.Add(discoveryInterval + leaseTTL + lossSlack)
			t.Logf("%s took %v; no poll may start after %v from then", loss, event.Sub(lost).Round(time.Millisecond),
				bound.Sub(event))

			late := assertEventually(time.Until(bound)+lossWatch, func() bool { return len(rec.polledSince(bound, nil)) > 0 })
			last, perSession := lastPolls(rec, event)
			t.Logf("after the loss: %d sessions polled, the last poll %v after it", len(perSession), last)
			require.False(t, late, "polls after the bound (%v after the loss) of %d sessions: %s", bound.Sub(event),
				len(rec.polledSince(bound, nil)), describeLate(rec, bound, event))

			for _, w := range ws {
				select {
				case <-w.done:
					t.Fatalf("%s exited: %v", w.id, w.err)
				default:
				}
			}

			// Status and metrics agree with Redis: nothing left.
			var disagree string
			ok := assertEventually(5*time.Second, func() bool {
				disagree = lossDisagreement(t, admin, rds.URL(), ws)
				return disagree == ""
			})
			require.True(t, ok, "status and /metrics do not agree with an empty Redis: %s", disagree)

			// The workers still work: a session put now is polled.
			fresh := time.Now()
			store, err := session.NewStore(admin, keyspace.Space{})
			require.NoError(t, err)
			require.NoError(t, store.Put(context.Background(), session.Session{ID: "after-" + loss, URL: rec.URL + "/after", Interval: session.Duration(200 * time.Millisecond)}))
			require.Eventually(t, func() bool { return rec.polledSince(fresh, nil)["after-"+loss] }, 10*time.Second, 20*time.Millisecond,
				"a session put after the loss is polled")
			t.Logf("a session put after the loss was polled within %v", time.Since(fresh).Round(time.Millisecond))
		})
	}
}

// addLossSessions puts lossSessions sessions with intervals from 200 ms to
// 1 s.
func addLossSessions(t *testing.T, admin *redis.Client, url string) []string {
	t.Helper()
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	ids := make([]string, lossSessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("lost-%02d", i)
		iv := time.Duration(200*(1+i%5)) * time.Millisecond
		require.NoError(t, store.Put(context.Background(), session.Session{ID: ids[i], URL: url + "/" + ids[i], Interval: session.Duration(iv)}))
	}
	return ids
}

// lastPolls returns how long after from the last poll started, and the
// number of polls per session that started after from.
func lastPolls(rec *recorder, from time.Time) (time.Duration, map[string]int) {
	var last time.Duration
	n := map[string]int{}
	for _, p := range rec.snapshot() {
		if p.Start.Before(from) {
			continue
		}
		n[p.Session]++
		last = max(last, p.Start.Sub(from))
	}
	return last.Round(time.Millisecond), n
}

// describeLate lists the sessions polled after bound: worker, tokens and
// times from event.
func describeLate(rec *recorder, bound, event time.Time) string {
	type agg struct {
		n            int
		workers      map[string]bool
		minTok, last int64
		at           time.Duration
	}
	by := map[string]*agg{}
	for _, p := range rec.snapshot() {
		if p.Start.Before(bound) {
			continue
		}
		a := by[p.Session]
		if a == nil {
			a = &agg{workers: map[string]bool{}, minTok: p.Token}
			by[p.Session] = a
		}
		a.n++
		a.workers[p.Worker] = true
		a.minTok, a.last = min(a.minTok, p.Token), max(a.last, p.Token)
		a.at = max(a.at, p.Start.Sub(event))
	}
	ids := make([]string, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for i, id := range ids {
		if i == 8 {
			fmt.Fprintf(&b, "; and %d more", len(ids)-i)
			break
		}
		a := by[id]
		ws := make([]string, 0, len(a.workers))
		for w := range a.workers {
			ws = append(ws, w)
		}
		sort.Strings(ws)
		fmt.Fprintf(&b, "; %s: %d polls by %s, tokens %d-%d, last at +%v", id, a.n, strings.Join(ws, ","), a.minTok, a.last,
			a.at.Round(time.Millisecond))
	}
	return strings.TrimPrefix(b.String(), "; ")
}

// lossStatus is the part of `pollworker status --json` this test reads.
type lossStatus struct {
	Nodes []struct {
		ID     string `json:"id"`
		Leases int    `json:"leases"`
	} `json:"nodes"`
	Sessions struct {
		Total int `json:"total"`
	} `json:"sessions"`
	Leases struct {
		Held int `json:"held"`
	} `json:"leases"`
	UnknownLeases struct {
		Scanned bool `json:"scanned"`
		Count   int  `json:"count"`
	} `json:"unknown_leases"`
}

// lossDisagreement returns "" when Redis holds no lease, status reports no
// session and no lease (of known or unknown sessions, per node too), and
// every worker's /metrics reports no lease held and no session owned or
// active; else what differs.
func lossDisagreement(t *testing.T, admin *redis.Client, redisURL string, ws []lossWorker) string {
	t.Helper()
	var diffs []string
	keys, err := admin.Keys(context.Background(), "poll:lease:*").Result()
	if err != nil {
		return fmt.Sprintf("KEYS: %v", err)
	}
	if len(keys) > 0 {
		sort.Strings(keys)
		diffs = append(diffs, fmt.Sprintf("Redis holds %d lease keys (%s)", len(keys), strings.Join(keys[:min(len(keys), 5)], " ")))
	}
	out, err := pollworker(t, "status", "--redis-url", redisURL, "--json")
	if err != nil {
		return fmt.Sprintf("status: %v: %s", err, out)
	}
	var st lossStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return fmt.Sprintf("status --json: %v: %s", err, out)
	}
	if st.Sessions.Total != 0 || st.Leases.Held != 0 || !st.UnknownLeases.Scanned || st.UnknownLeases.Count != 0 {
		diffs = append(diffs, fmt.Sprintf("status: sessions %d, leases %d, unknown leases %d (scanned %v)",
			st.Sessions.Total, st.Leases.Held, st.UnknownLeases.Count, st.UnknownLeases.Scanned))
	}
	for _, n := range st.Nodes {
		if n.Leases != 0 {
			diffs = append(diffs, fmt.Sprintf("status: node %s holds %d leases", n.ID, n.Leases))
		}
	}
	for _, w := range ws {
		m, err := w.metrics()
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s /metrics: %v", w.id, err))
			continue
		}
		for _, name := range []string{`pollworker_leases_held`, `pollworker_sessions{state="owned"}`, `pollworker_sessions{state="pending"}`} {
			if v := m[name]; v != 0 {
				diffs = append(diffs, fmt.Sprintf("%s: %s %v", w.id, name, v))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

// metrics reads the worker's /metrics: sample (name with labels as
// exposed) -> value.
func (w lossWorker) metrics() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "pollworker_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}
