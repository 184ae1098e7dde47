package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	token           int64
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
		token, _ := strconv.ParseInt(r.Header.Get("X-Poll-Token"), 10, 64)
		tg.mu.Lock()
		defer tg.mu.Unlock()
		if err != nil {
			tg.bad = append(tg.bad, fmt.Sprintf("poll without a valid X-Poll-Slot: %v", r.Header))
			return
		}
		tg.polls = append(tg.polls, slotPoll{r.Header.Get("X-Poll-Session"), r.Header.Get("X-Poll-Worker"), token, slot, at})
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

// sessionsFrom counts the sessions that ran a slot at or after from.
func (tg *slotTarget) sessionsFrom(from time.Time) int {
	seen := map[string]bool{}
	for _, p := range tg.snapshot() {
		if !p.slot.Before(from) {
			seen[p.session] = true
		}
	}
	return len(seen)
}

// checkHeaders fails the test if a poll came without a valid X-Poll-Slot.
func (tg *slotTarget) checkHeaders(t *testing.T) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	require.Empty(t, tg.bad)
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
	polled := tg.sessionsFrom
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

	tg.checkHeaders(t)
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
	t.Logf("%d polls of %d sessions, slots %s..%s checked; kill -9 at %s: %d slots ran twice (polls in flight at the kill); "+
		"lateness p50 %v p99 %v overall, p99 %v outside the failover",
		len(polls), n, from.UTC().Format(time.TimeOnly), to.UTC().Format(time.TimeOnly), killed.UTC().Format("15:04:05.000"), killedTwice,
		percentile(lateness, 0.5), percentile(lateness, 0.99), percentile(lateOutside, 0.99))
}

// percentile returns the q-quantile of d (sorting d), 0 for none.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(int(float64(len(d))*q), len(d)-1)]
}

// TestSchedulesOutages is issue 25's acceptance of catch-up and data loss
// against the real binary, on one fleet (two workers) and 12 sessions on
// '* * * * * *' with catchup all, applied from a file:
//
//   - fleet-stop: both workers stop (SIGTERM) for 10 s, then start again:
//     every slot missed meanwhile runs once, in order, none before its
//     time.
//   - redis-restart: redis-server restarts without persistence and the
//     same file is applied again: the recorded slots are gone, so the new
//     holders run no slot due before the loss (catchup all has nothing to
//     catch up from), no slot runs twice and none before its time.
//
// Throughout, each session's X-Poll-Slot values strictly increase in the
// order the target receives them. Lateness is reported, not asserted.
func TestSchedulesOutages(t *testing.T) {
	const n, every, outage = 12, time.Second, 10 * time.Second
	rds := startRedis(t)
	tg := newSlotTarget(t)
	var b strings.Builder
	b.WriteString("sessions:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - id: out-%02d\n    url: %s/out-%02d\n    schedule: '* * * * * *'\n    catchup: all\n", i, tg.URL, i)
	}
	apply := fileApplier(t, rds.URL(), b.String(), n)
	apply()
	fleet := func() []*worker {
		return []*worker{startWorker(t, rds.URL(), "w1"), startWorker(t, rds.URL(), "w2")}
	}
	ws := fleet()
	// every session's slots from `from` on are checked.
	require.Eventually(t, func() bool { return tg.sessionsFrom(time.Time{}) == n }, 30*time.Second, 20*time.Millisecond, "every session polled")
	from := time.Now().Truncate(every).Add(every)

	var stopped, restarted time.Time
	ok := t.Run("fleet-stop", func(t *testing.T) {
		require.Eventually(t, func() bool { return tg.sessionsFrom(from.Add(every)) == n }, 30*time.Second, 20*time.Millisecond)
		for _, w := range ws {
			w.signal(t, syscall.SIGTERM)
		}
		for _, w := range ws {
			require.NoError(t, w.wait(t, 15*time.Second), "%s drains and exits 0", w.id)
		}
		stopped = time.Now()
		// The outage: nothing may poll while no worker runs.
		late := assertEventually(time.Until(stopped.Add(outage)), func() bool {
			return slices.ContainsFunc(tg.snapshot(), func(p slotPoll) bool { return p.at.After(stopped) })
		})
		require.False(t, late, "a poll while the whole fleet was stopped")
		ws = fleet()
		restarted = time.Now()
		live := restarted.Truncate(every).Add(2 * every)
		require.Eventually(t, func() bool { return tg.sessionsFrom(live) == n }, 30*time.Second, 20*time.Millisecond,
			"every session catches up and runs its slots again")

		tg.checkHeaders(t)
		runs := checkSlotOrder(t, tg.snapshot())
		var catchUp []time.Duration
		var caughtFirst, caughtLast time.Time // when the missed slots ran
		for i := range n {
			id := fmt.Sprintf("out-%02d", i)
			for slot := from; !slot.After(live); slot = slot.Add(every) {
				ps := runs[slotRun{id, slot.Unix()}]
				require.Len(t, ps, 1, "%s: slot %s ran %d times, want once: %+v", id, slot.UTC().Format(time.TimeOnly), len(ps), ps)
				if slot.After(stopped) && slot.Before(restarted) {
					catchUp = append(catchUp, ps[0].at.Sub(slot))
					if caughtFirst.IsZero() || ps[0].at.Before(caughtFirst) {
						caughtFirst = ps[0].at
					}
					if ps[0].at.After(caughtLast) {
						caughtLast = ps[0].at
					}
				}
			}
		}
		require.NotEmpty(t, catchUp, "slots fell in the outage")
		t.Logf("fleet stopped %s..%s: %d missed slots of %d sessions each ran once, in order, %v to %v after their time, "+
			"%v to %v after the restart",
			stopped.UTC().Format("15:04:05.000"), restarted.UTC().Format("15:04:05.000"), len(catchUp), n,
			percentile(catchUp, 0).Round(time.Millisecond), percentile(catchUp, 1).Round(time.Millisecond),
			caughtFirst.Sub(restarted).Round(time.Millisecond), caughtLast.Sub(restarted).Round(time.Millisecond))
	})
	if !ok {
		return
	}

	t.Run("redis-restart", func(t *testing.T) {
		before := map[string]int64{} // each session's last token before the loss
		for _, p := range tg.snapshot() {
			before[p.session] = max(before[p.session], p.token)
		}
		lost := time.Now()
		rds.Restart() // SIGKILL, then a new redis-server without persistence
		apply()
		applied := time.Now()
		// The loss quarantine (the lease TTL) passes before anyone takes
		// a lease; wait for two slots under the new leases.
		end := applied.Add(leaseTTL).Truncate(every).Add(2 * every)
		require.Eventually(t, func() bool { return tg.sessionsFrom(end) == n }, 30*time.Second, 20*time.Millisecond,
			"every session runs its slots again after the re-apply")

		tg.checkHeaders(t)
		polls := tg.snapshot()
		runs := checkSlotOrder(t, polls)
		for k, ps := range runs {
			require.Len(t, ps, 1, "%s: slot %s ran %d times: %+v", k.session, time.Unix(k.slot, 0).UTC().Format(time.TimeOnly), len(ps), ps)
		}
		var gaps []time.Duration
		for id, tok := range before {
			var last, first time.Time // the last slot run before the loss, the first under a new lease
			for _, p := range polls {
				if p.session != id {
					continue
				}
				if p.token <= tok {
					last = p.slot
				} else if first.IsZero() {
					first = p.slot
				}
			}
			require.False(t, first.IsZero(), "%s: no poll under a new lease", id)
			require.False(t, first.Before(lost), "%s: slot %s, due before the loss, ran under a new lease (the slot state was lost: nothing to catch up from)",
				id, first.UTC().Format(time.TimeOnly))
			gaps = append(gaps, first.Sub(last)-every)
		}
		t.Logf("redis restarted without persistence at %s, re-applied %v later: no slot ran twice; slots lost per session (the loss quarantine) %v to %v",
			lost.UTC().Format("15:04:05.000"), applied.Sub(lost).Round(time.Millisecond),
			percentile(gaps, 0).Round(time.Second), percentile(gaps, 1).Round(time.Second))
	})
}

// slotRun is one slot of one session.
type slotRun struct {
	session string
	slot    int64 // Unix seconds
}

// checkSlotOrder fails the test if a poll came before its slot, or if a
// session's slots do not strictly increase in the order the target
// received them; it returns the polls of each slot.
func checkSlotOrder(t *testing.T, polls []slotPoll) map[slotRun][]slotPoll {
	t.Helper()
	last := map[string]time.Time{}
	runs := map[slotRun][]slotPoll{}
	for _, p := range polls {
		require.False(t, p.at.Before(p.slot), "%s slot %v polled early at %v by %s", p.session, p.slot, p.at, p.worker)
		if prev, ok := last[p.session]; ok {
			require.True(t, p.slot.After(prev), "%s: slot %s ran after slot %s", p.session,
				p.slot.UTC().Format(time.TimeOnly), prev.UTC().Format(time.TimeOnly))
		}
		last[p.session] = p.slot
		k := slotRun{p.session, p.slot.Unix()}
		runs[k] = append(runs[k], p)
	}
	return runs
}

// fileApplier writes a sessions file holding yaml and returns a function
// that applies it with `pollworker sessions apply -f`, requiring that it
// creates n sessions (a first apply, or one after Redis lost them).
func fileApplier(t *testing.T, redisURL, yaml string, n int) func() {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sessions.yaml")
	require.NoError(t, os.WriteFile(file, []byte(yaml), 0o600))
	return func() {
		t.Helper()
		out, err := pollworker(t, "sessions", "apply", "--redis-url", redisURL, "-f", file)
		require.NoError(t, err, out)
		require.Contains(t, out, fmt.Sprintf("created %d,", n), "the sessions are (re)created")
	}
}
