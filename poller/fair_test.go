package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/session"
)

// TestSchedulerSlowsEverySessionAlike: under overload, every session's
// gap between polls is its interval × due/achieved, whatever its
// interval, whether the polls wait for the limit's slots, their host's
// (a group) or both: 4 sessions every 100 ms and 4 every 2 s are due 42
// polls a second, each poll takes 50 ms on the fake clock and one runs at
// once, so 20 run a second and every gap is 2.1 intervals (210 ms and
// 4.2 s). Earliest due first gave every poll the same wait instead: the
// 2 s sessions were polled on time and the 100 ms ones every 222 ms. A
// session added during the overload is polled among the first polls
// after it is due, not behind the others' turns.
func TestSchedulerSlowsEverySessionAlike(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit int
		group int
	}{
		{name: "limit", limit: 1},
		{name: "group", group: 1},
		{name: "both", limit: 1, group: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newSchedFixture(t, func(c *schedConfig) {
				c.Limit = tt.limit
				if tt.group > 0 {
					c.GroupOf = func(*session.Session) (string, int) { return "host", tt.group }
				}
			})
			intervals := map[string]time.Duration{}
			for i := range 4 {
				intervals[fmt.Sprintf("short%d", i)] = 100 * time.Millisecond
				intervals[fmt.Sprintf("long%d", i)] = 2 * time.Second
			}
			var loops []*pollLoop
			start := func(id string) {
				r := f.leases.Acquire(context.Background(), []string{id})
				require.NotNil(t, r[0].Lease)
				w := &pollLoop{sess: &session.Session{ID: id, Interval: session.Duration(intervals[id])}, lease: r[0].Lease}
				loops = append(loops, w)
				f.sched.Start(w, time.Time{})
			}
			for id := range intervals {
				start(id)
			}
			const pollTakes = 50 * time.Millisecond
			begin := f.clock.Now()
			polls := map[string][]time.Time{}
			var running []pollCall
			added, addedAt, n := false, time.Time{}, 0
			for f.clock.Now().Sub(begin) < 30*time.Second {
				for len(running) < max(tt.limit, 1) {
					running = append(running, f.nextPoll())
				}
				p := running[0]
				running = running[1:]
				polls[p.w.sess.ID] = append(polls[p.w.sess.ID], p.at)
				if !added && f.clock.Now().Sub(begin) >= 20*time.Second {
					intervals["new"], added, addedAt = time.Second, true, f.clock.Now()
					start("new")
				}
				if n++; n%20 == 0 { // every second of the fake clock: the leases last 3
					_ = f.leases.RenewAll(context.Background())
				}
				f.stepTimer(pollTakes)
				close(p.finish)
			}
			for _, p := range running {
				close(p.finish)
			}
			for _, w := range loops {
				f.sched.Stop(w)
			}
			stopped := make(chan struct{})
			go func() { // polls launched before the stops return at once
				for {
					select {
					case p := <-f.polls:
						close(p.finish)
					case <-stopped:
						return
					}
				}
			}()
			for _, w := range loops {
				requireDone(t, f.sched, w)
			}
			close(stopped)

			stretch := 42.0 / 20 // due / achieved
			for id, iv := range intervals {
				if id == "new" {
					continue
				}
				times := polls[id]
				var steady []time.Time // after the first 5 s
				for _, at := range times {
					if at.Sub(begin) >= 5*time.Second {
						steady = append(steady, at)
					}
				}
				require.GreaterOrEqual(t, len(steady), 3, "%s polled %d times", id, len(times))
				mean := steady[len(steady)-1].Sub(steady[0]) / time.Duration(len(steady)-1)
				ratio := float64(mean) / float64(iv)
				require.InDelta(t, stretch, ratio, stretch*0.12, "%s (every %v) polled every %v: %.2f intervals, not about %.2f", id, iv, mean, ratio, stretch)
			}
			require.NotEmpty(t, polls["new"], "the session added under overload was never polled")
			require.Less(t, polls["new"][0].Sub(addedAt), 500*time.Millisecond, "the session added under overload waited behind the others' turns")
		})
	}
}

// TestSchedulerLongIntervalWaitsBoundedly: under the same overload, a
// session of a long interval waits about maxFairLag × due/achieved past
// its due time at most, not (due/achieved − 1) × its interval: 4 sessions
// every 100 ms on a worker running half of their polls, and one every
// 40 s, polled every 40-60 s (proportionally it would wait 40 s more).
func TestSchedulerLongIntervalWaitsBoundedly(t *testing.T) {
	t.Parallel()
	f := newSchedFixture(t, func(c *schedConfig) { c.Limit = 1 })
	const long = 40 * time.Second
	var loops []*pollLoop
	for i := range 5 {
		id, iv := fmt.Sprintf("short%d", i), 100*time.Millisecond
		if i == 4 {
			id, iv = "long", long
		}
		r := f.leases.Acquire(context.Background(), []string{id})
		require.NotNil(t, r[0].Lease)
		w := &pollLoop{sess: &session.Session{ID: id, Interval: session.Duration(iv)}, lease: r[0].Lease}
		loops = append(loops, w)
		f.sched.Start(w, time.Time{})
	}
	begin := f.clock.Now()
	var longPolls []time.Time
	for n := 0; f.clock.Now().Sub(begin) < 3*long+20*time.Second; n++ {
		p := f.nextPoll()
		if p.w.sess.ID == "long" {
			longPolls = append(longPolls, p.at)
		}
		if n%20 == 0 {
			_ = f.leases.RenewAll(context.Background())
		}
		f.stepTimer(50 * time.Millisecond)
		close(p.finish)
	}
	f.stopAll(loops...)
	require.GreaterOrEqual(t, len(longPolls), 3, "polled at %v", longPolls)
	// Its due times are an interval apart, so a poll that started late is
	// followed by one less than an interval after it (by its lateness); the
	// wait past due is at most maxFairLag × due/achieved (2 here), 20 s,
	// give or take a poll's 50 ms: proportionally it would be 40 s.
	for i := 1; i < len(longPolls); i++ {
		gap := longPolls[i].Sub(longPolls[i-1])
		require.Greater(t, gap, long-time.Second, "poll %d of the long session came %v after the one before", i, gap)
		require.Less(t, gap, long+2*time.Duration(maxFairLag)+time.Second, "poll %d of the long session came %v after the one before", i, gap)
	}
}
