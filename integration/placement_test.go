package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// TestPlacementRules is issue 15 item 4: four `pollworker run` processes
// in two zones (--labels zone=eu / zone=us), sessions split between the
// zones' selectors (and a few with none). At the target, no session is
// ever polled by a worker of the other zone (X-Poll-Worker); inside each
// zone the sessions are balanced within ±15 %; when the zone's last worker
// leaves, its sessions are reported as unplaceable (status, check, the
// metric of a worker of the other zone) and polled by nobody, while the
// sessions without a selector move to the remaining workers.
func TestPlacementRules(t *testing.T) {
	rds := startRedis(t)
	url := rds.URL()
	tg := newTarget(t)

	zoneOf := map[string]string{"eu1": "eu", "eu2": "eu", "us1": "us", "us2": "us"}
	const perZone, plain = 120, 40
	var file strings.Builder
	file.WriteString("sessions:\n")
	sessionZone := map[string]string{} // session -> the zone its selector names, "" for none
	var euIDs, usIDs, plainIDs []string
	for _, z := range []string{"eu", "us"} {
		for i := range perZone {
			id := fmt.Sprintf("%s-%03d", z, i)
			sessionZone[id] = z
			fmt.Fprintf(&file, "  - id: %s\n    url: %s/%s\n    interval: 200ms\n    selector: zone=%s\n", id, tg.URL, id, z)
			if z == "eu" {
				euIDs = append(euIDs, id)
			} else {
				usIDs = append(usIDs, id)
			}
		}
	}
	for i := range plain {
		id := fmt.Sprintf("any-%03d", i)
		sessionZone[id] = ""
		plainIDs = append(plainIDs, id)
		fmt.Fprintf(&file, "  - id: %s\n    url: %s/%s\n    interval: 200ms\n", id, tg.URL, id)
	}
	path := filepath.Join(t.TempDir(), "sessions.yaml")
	require.NoError(t, os.WriteFile(path, []byte(file.String()), 0o600))
	out, err := pollworker(t, "sessions", "apply", "--redis-url", url, "-f", path)
	require.NoError(t, err, out)

	metricsAddr := freeAddr(t)
	workers := map[string]*worker{}
	for _, id := range []string{"eu1", "eu2", "us1", "us2"} {
		extra := []string{"--labels", "zone=" + zoneOf[id]}
		if id == "us1" {
			extra = append(extra, "--http-addr", metricsAddr)
		}
		workers[id] = startWorker(t, url, id, extra...)
	}

	// Every session is polled, and the placement settles.
	all := append(append(append([]string(nil), euIDs...), usIDs...), plainIDs...)
	start := time.Now()
	require.Eventually(t, func() bool {
		seen := map[string]bool{}
		for _, p := range tg.since(start) {
			seen[p.session] = true
		}
		return len(seen) == len(all)
	}, 30*time.Second, 50*time.Millisecond, "every session polled")
	c := rds.Client(t)
	holders := func(ids []string) map[string]int {
		hs, err := lease.Inspect(context.Background(), c, keyspace.Space{}, ids, 0)
		require.NoError(t, err)
		per := map[string]int{}
		for _, h := range hs {
			if h.Owner != "" {
				per[lease.HolderOf(h.Owner)]++
			}
		}
		return per
	}
	balanced := func(ids []string, zone string) bool {
		per := holders(ids)
		n := 0
		for w, k := range per {
			if zoneOf[w] != zone {
				return false
			}
			n += k
		}
		mean := float64(len(ids)) / 2
		for w, z := range zoneOf {
			if z == zone && (float64(per[w]) < 0.85*mean || float64(per[w]) > 1.15*mean) {
				return false
			}
		}
		return n == len(ids)
	}
	require.Eventually(t, func() bool { return balanced(euIDs, "eu") && balanced(usIDs, "us") }, 30*time.Second, 100*time.Millisecond,
		"each zone's sessions held by its two workers within ±15 %%: eu %v, us %v", holders(euIDs), holders(usIDs))
	t.Logf("held: eu %v, us %v, no selector %v", holders(euIDs), holders(usIDs), holders(plainIDs))

	// The zone's last workers leave: its sessions are unplaceable, polled
	// by nobody (not moved to the other zone).
	for _, id := range []string{"eu1", "eu2"} {
		workers[id].signal(t, syscall.SIGTERM)
		require.NoError(t, workers[id].wait(t, 15*time.Second))
	}
	left := time.Now()
	require.Eventually(t, func() bool {
		var st struct {
			Unplaceable struct {
				Count      int            `json:"count"`
				BySelector map[string]int `json:"by_selector"`
			} `json:"unplaceable"`
		}
		out, err := pollworker(t, "status", "--redis-url", url, "--json")
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Unplaceable.Count == perZone && st.Unplaceable.BySelector["zone=eu"] == perZone
	}, 15*time.Second, 100*time.Millisecond, "status reports the eu sessions as unplaceable")
	require.Eventually(t, func() bool {
		return metric(t, "http://"+metricsAddr+"/metrics", "pollworker_sessions_unplaceable") == perZone
	},
		15*time.Second, 100*time.Millisecond, "the metric of a worker of the other zone")
	// The sessions without a selector are all held by the us workers now.
	require.Eventually(t, func() bool {
		per := holders(plainIDs)
		return per["us1"]+per["us2"] == plain
	}, 15*time.Second, 100*time.Millisecond, "sessions without a selector move to the remaining workers: %v", holders(plainIDs))
	out, err = pollworker(t, "check", "--redis-url", url, "--grace", "500ms")
	require.Error(t, err, out)
	require.Contains(t, out, "unplaceable")
	require.Contains(t, out, fmt.Sprintf("selector zone=eu: %d active sessions and no live worker whose labels match it", perZone))
	require.NotRegexp(t, `(?m)^session-without-lease:`, out, "unplaceable sessions are not also reported as without a lease")
	out, err = pollworker(t, "explain", "--redis-url", url, euIDs[0])
	require.NoError(t, err, out)
	require.Contains(t, out, "no live worker matches its selector zone=eu")

	// Nobody polls an eu session after its last worker left.
	require.Never(t, func() bool {
		for _, p := range tg.since(left) {
			if sessionZone[p.session] == "eu" {
				return true
			}
		}
		return false
	}, 3*time.Second, 100*time.Millisecond, "an eu session polled after the zone's last worker left")

	// Over the whole run: no session polled by a worker of another zone.
	for _, p := range tg.since(start) {
		if z := sessionZone[p.session]; z != "" {
			require.Equal(t, z, zoneOf[p.worker], "session %s (selector zone=%s) polled by %s", p.session, z, p.worker)
		}
	}
	tg.check(t)
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// metric reads one unlabelled gauge from a Prometheus endpoint, -1 when
// unavailable.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return -1
	}
	return v
}
