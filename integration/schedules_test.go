package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// slotTarget records every poll of a scheduled session: its X-Poll-Slot,
// the worker, and when it arrived.
type slotTarget struct {
	URL   string
	mu    sync.Mutex
	polls []slotPoll
	bad   []string
}

type slotPoll struct {
	session, worker string
	slot, at        time.Time
}

func newSlotTarget(t *testing.T) *slotTarget {
	t.Helper()
	tg := &slotTarget{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tg.URL = "http://" + l.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		slot, err := time.Parse(time.RFC3339, r.Header.Get("X-Poll-Slot"))
		tg.mu.Lock()
		defer tg.mu.Unlock()
		if err != nil {
			tg.bad = append(tg.bad, fmt.Sprintf("poll without a valid X-Poll-Slot: %v", r.Header))
			return
		}
		tg.polls = append(tg.polls, slotPoll{r.Header.Get("X-Poll-Session"), r.Header.Get("X-Poll-Worker"), slot, at})
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tg
}

func (tg *slotTarget) snapshot() []slotPoll {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return slices.Clone(tg.polls)
}

// TestSchedulesAcceptance is issue 25's real-binary run: three workers, 200
// sessions on '*/2 * * * * *' with catchup all, a SIGTERM of one worker and
// a kill -9 of another. Every slot of every session in the checked window
// runs at least once, at most once except polls the killed worker had
// started (counted), and none before its slot time. Lateness is reported,
// not asserted: it depends on the machine.
func TestSchedulesAcceptance(t *testing.T) {
	const n, every = 200, 2 * time.Second
	rds := startRedis(t)
	tg := newSlotTarget(t)
	store, err := session.NewStore(rds.Client(t), keyspace.Space{})
	require.NoError(t, err)
	for i := range n {
		id := fmt.Sprintf("cron-%03d", i)
		require.NoError(t, store.Put(context.Background(), session.Session{ID: id, URL: tg.URL + "/" + id,
			Schedule: "*/2 * * * * *", CatchUp: "all"}))
	}
	w := map[string]*worker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		w[id] = startWorker(t, rds.URL(), id)
	}
	polled := func(after time.Time) int {
		seen := map[string]bool{}
		for _, p := range tg.snapshot() {
			if !p.slot.Before(after) {
				seen[p.session] = true
			}
		}
		return len(seen)
	}
	require.Eventually(t, func() bool { return polled(time.Time{}) == n }, 30*time.Second, 50*time.Millisecond, "every session polled")
	from := time.Now().Truncate(every).Add(every) // the first slot every session has after the start
	require.Eventually(t, func() bool { return polled(from.Add(2*every)) == n }, 30*time.Second, 50*time.Millisecond)

	w["w1"].signal(t, syscall.SIGTERM)
	require.NoError(t, w["w1"].wait(t, 15*time.Second), "drain exits 0")
	afterDrain := time.Now().Add(every)
	require.Eventually(t, func() bool { return polled(afterDrain) == n }, 30*time.Second, 50*time.Millisecond, "every session runs after the SIGTERM")
	killed := time.Now()
	w["w2"].signal(t, syscall.SIGKILL)
	_ = w["w2"].wait(t, 10*time.Second)
	// After the lease TTL the successor catches up: wait until every
	// session has run a slot past the TTL, then check up to the kill.
	to := killed.Add(3 * time.Second).Truncate(every).Add(2 * every)
	require.Eventually(t, func() bool { return polled(to) == n }, 60*time.Second, 50*time.Millisecond, "every session runs after the kill -9")

	tg.mu.Lock()
	require.Empty(t, tg.bad)
	tg.mu.Unlock()
	polls := tg.snapshot()
	type key struct {
		session string
		slot    int64 // Unix seconds
	}
	runs := map[key][]slotPoll{}
	var lateness, lateOutside []time.Duration
	for _, p := range polls {
		require.False(t, p.at.Before(p.slot), "%s slot %v polled early at %v by %s", p.session, p.slot, p.at, p.worker)
		runs[key{p.session, p.slot.Unix()}] = append(runs[key{p.session, p.slot.Unix()}], p)
		late := p.at.Sub(p.slot)
		lateness = append(lateness, late)
		if p.slot.Before(killed.Add(-every)) || p.slot.After(killed.Add(3*time.Second+2*every)) {
			lateOutside = append(lateOutside, late)
		}
	}
	missing, killedTwice := 0, 0
	for i := range n {
		id := fmt.Sprintf("cron-%03d", i)
		for slot := from; !slot.After(to); slot = slot.Add(every) {
			rs := runs[key{id, slot.Unix()}]
			if len(rs) == 0 {
				if missing++; missing < 10 {
					t.Errorf("%s: slot %v never ran", id, slot.UTC().Format(time.TimeOnly))
				}
				continue
			}
			if len(rs) > 1 {
				// Only a poll the killed worker had started may run again.
				byW2 := slices.ContainsFunc(rs, func(p slotPoll) bool { return p.worker == "w2" })
				require.True(t, byW2 && !rs[0].at.After(killed.Add(time.Second)), "%s: slot %v ran %d times: %+v", id, slot, len(rs), rs)
				killedTwice++
			}
		}
	}
	if missing > 0 {
		for _, p := range polls {
			if p.session == "cron-000" {
				t.Logf("cron-000: slot %s by %s at %s", p.slot.UTC().Format(time.TimeOnly), p.worker, p.at.UTC().Format("15:04:05.000"))
			}
		}
		t.Logf("from %s to %s, killed %s", from.UTC().Format(time.TimeOnly), to.UTC().Format(time.TimeOnly), killed.UTC().Format("15:04:05.000"))
	}
	require.Zero(t, missing)
	pct := func(d []time.Duration, q float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return d[min(int(float64(len(d))*q), len(d)-1)]
	}
	t.Logf("%d polls of %d sessions, slots %s..%s checked; kill -9 at %s: %d slots ran twice (polls in flight at the kill); "+
		"lateness p50 %v p99 %v overall, p99 %v outside the failover",
		len(polls), n, from.UTC().Format(time.TimeOnly), to.UTC().Format(time.TimeOnly), killed.UTC().Format("15:04:05.000"), killedTwice,
		pct(lateness, 0.5), pct(lateness, 0.99), pct(lateOutside, 0.99))
}
