package poller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// pollLog records the start of every poll: session -> (worker, time).
type pollLog struct {
	mu    sync.Mutex
	polls map[string][]pollAt
}

type pollAt struct {
	worker string
	at     time.Time
	token  int64
	// due is, at the first poll under a lease handed over gracefully, when
	// the previous holder said the next poll was due (Lease.NextPoll).
	due      time.Time
	handed   bool
	acquired time.Time // when that lease was acquired (Lease.Acquired)
}

func (p *pollLog) poller(worker string) Poller {
	return PollFunc(func(_ context.Context, tn *Turn) error {
		s, at := tn.Session(), time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.polls[s.ID] = append(p.polls[s.ID], newPollAt(worker, tn, at, p.polls[s.ID]))
		return nil
	})
}

// newPollAt returns the record of a poll by worker in turn tn, begun at
// at, after the session's polls before.
func newPollAt(worker string, tn *Turn, at time.Time, before []pollAt) pollAt {
	pa := pollAt{worker: worker, at: at, token: tn.Token()}
	if tn.lease != nil && (len(before) == 0 || before[len(before)-1].token != pa.token) {
		pa.due, pa.handed = tn.lease.NextPoll()
		pa.acquired = tn.lease.Acquired()
	}
	return pa
}

// handoffs returns, for every session whose polls went from one worker to
// another, the time from the last poll of the first to the first poll of
// the second (the last such change).
func (p *pollLog) handoffs() map[string]time.Duration {
	out := make(map[string]time.Duration)
	for id, h := range p.handoffPolls() {
		out[id] = h[1].at.Sub(h[0].at)
	}
	return out
}

// handoffPolls returns, for every session whose polls went from one worker
// to another, the last poll of the first and the first of the second (the
// last such change).
func (p *pollLog) handoffPolls() map[string][2]pollAt {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][2]pollAt)
	for id, ps := range p.polls {
		for i := 1; i < len(ps); i++ {
			if ps[i].worker != ps[i-1].worker {
				out[id] = [2]pollAt{ps[i-1], ps[i]}
			}
		}
	}
	return out
}

func (p *pollLog) polledBy(id, worker string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pa := range p.polls[id] {
		if pa.worker == worker {
			return true
		}
	}
	return false
}

// TestGracefulHandoffKeepsTheSchedule is issue 10 item 4: a session moved
// by a join or by a graceful shutdown is polled by its successor when its
// next poll was due (previous poll + interval), not at once. Before the
// fix, the successor polled as soon as it acquired the lease.
func TestGracefulHandoffKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	intervals := map[string]time.Duration{}
	for i := range 20 {
		// 0.4s to 2.2s: a successor that polls at once (the bug) still
		// polls well before its session's next due time, and the test
		// waits at most the longest interval for each move.
		id := fmt.Sprintf("mixed-%d", i)
		intervals[id] = time.Duration(2+i%10) * 200 * time.Millisecond
		require.NoError(t, store.Put(context.Background(), session.Session{ID: id,
			URL: "http://127.0.0.1:1/" + id, Interval: session.Duration(intervals[id])}))
	}
	log := &pollLog{polls: map[string][]pollAt{}}
	shaken := newShakenLeases()
	cfg := func(id string) Config {
		c := fastConfig(client, id, log.poller(id))
		c.BalanceSlack = -1
		c.Observer = shaken.observer()
		return c
	}
	a := start(t, cfg("a"))
	require.Eventually(t, func() bool {
		for id := range intervals {
			if !log.polledBy(id, "a") {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)

	// A join moves about half of them to b, then a graceful stop of a
	// moves the rest.
	b := start(t, cfg("b"))
	// Deadlines far beyond the 2.2 s longest interval a moved session waits
	// for its next poll: Eventually returns when the condition holds, and
	// a loaded machine (-race, a shared CI runner) joins slowly. On
	// failure, say what each worker holds and sees (which showed a
	// keeping its old plan with members [a b]: TestJoinReadInAFailedRoundIsPlanned).
	if !assert.Eventually(t, func() bool { return len(log.handoffs()) >= 5 }, time.Minute, 10*time.Millisecond,
		"b takes its share") {
		for _, w := range []*running{a, b} {
			st := w.c.Status()
			t.Logf("%s: ready %v, members %v, %d sessions, owned %v, polls %d, behind %v",
				st.ID, st.Ready, st.Members, st.Sessions, st.Owned, st.Polls, st.Behind)
		}
		t.Logf("handoffs %v", log.handoffs())
		t.FailNow()
	}
	a.stop(t)
	require.Eventually(t, func() bool { return len(log.handoffs()) == len(intervals) }, time.Minute, 10*time.Millisecond,
		"b takes every session once a has stopped")

	steady := log.steadyLateness(intervals)
	t.Logf("worst lateness of polls without a handoff: %v", steady)
	for id, h := range log.handoffPolls() {
		requireScheduleHandedOver(t, id, intervals[id], h[0], h[1], steady, cfg("x").LeaseTTL, shaken.of(id))
	}
}

// shakenLeases records the sessions whose lease went uncertain or was
// lost at any worker: on a loaded machine (-race, a shared CI runner) a
// renewal can outlast RequestTimeout. A lease that went uncertain has its
// poll cancelled (that turn does not poll: the next is an interval later),
// and a lost one is not released (no handoff mark): its session's handoff
// is not the graceful one the timing checks describe.
type shakenLeases struct {
	mu  sync.Mutex
	ids map[string]bool
}

func newShakenLeases() *shakenLeases { return &shakenLeases{ids: map[string]bool{}} }

func (s *shakenLeases) observer() Observer {
	return LeaseEvents(func(e Event) {
		if e.Type == EventUncertain || e.Type == EventLost {
			s.mu.Lock()
			s.ids[e.Session] = true
			s.mu.Unlock()
		}
	})
}

func (s *shakenLeases) of(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// requireScheduleHandedOver checks that a graceful handoff of session id
// (interval iv) from the poll last to the poll first kept its schedule,
// on the times the workers used rather than only on the gap between the
// polls (a poll's start is late by as much as the machine is loaded, on
// either side of a handoff). Late is measured against this machine at this
// moment: the worst lateness of polls that stayed with one worker
// (steady), four times over (a handoff is a release, a round and an
// acquisition, each as slow as the machine), plus the 250 ms a handoff may
// add on an idle machine.
//   - The successor never polls before the due time it was handed (the
//     bug of issue 10 item 4: it polled as soon as it acquired the lease).
//     This holds however loaded the machine is.
//   - A session whose lease went uncertain or was lost (shaken: the
//     machine was too slow for a renewal) may rightly have skipped a
//     poll, or been taken over without a mark; the rest is logged, not
//     checked, for it.
//   - The predecessor hands over its schedule: the due time it says is at
//     least half an interval after its last poll (a due time of "at
//     release" fails it for half of the sessions) and at most an interval,
//     the spread step (SpreadStep: at most a tenth of it) and late after
//     it (the release's one-way latency adds to it).
//   - The successor polls at that due time, and not later than late after
//     it, or after its acquisition when that came later (a join on a
//     loaded machine is slow): one that lost the schedule and waited a
//     lease TTL or another interval fails it.
//   - The successor was handed the schedule, unless it acquired the lease
//     after the mark's life (one lease TTL, ttl, past the due time it
//     carries: release.lua) could have ended: then it rightly finds none
//     and polls at once (logged). That due time is one interval and the
//     spread step after the last poll was due, which is up to late before
//     it began.
func requireScheduleHandedOver(t *testing.T, id string, iv time.Duration, last, first pollAt, steady, ttl time.Duration, shaken bool) {
	t.Helper()
	late := 250*time.Millisecond + 4*steady
	if first.handed {
		require.GreaterOrEqual(t, first.at.Sub(first.due), -50*time.Millisecond, "%s (interval %v) polled early after its handoff", id, iv)
	}
	if shaken {
		t.Logf("%s (interval %v): its lease went uncertain or was lost (a slow machine); handed %v, due %v and polled %v after the last poll",
			id, iv, first.handed, first.due.Sub(last.at), first.at.Sub(last.at))
		return
	}
	if !first.handed {
		waited := first.acquired.Sub(last.at)
		require.Greater(t, waited, iv+maxSpreadStep(iv)+ttl-late,
			"%s (interval %v): the successor acquired %v after the last poll, within the handoff mark's life, and was not handed the schedule", id, iv, waited)
		t.Logf("%s (interval %v): the successor acquired %v after the last poll, past the handoff mark's life: polled without the schedule, as designed", id, iv, waited)
		return
	}
	require.GreaterOrEqual(t, first.due.Sub(last.at), iv/2, "%s (interval %v): due time handed over", id, iv)
	require.LessOrEqual(t, first.due.Sub(last.at), iv+maxSpreadStep(iv)+late, "%s (interval %v): due time handed over", id, iv)
	require.LessOrEqual(t, first.at.Sub(maxTime(first.due, first.acquired)), late, "%s (interval %v) polled late after its handoff", id, iv)
}

// steadyLateness returns the longest time by which a poll came after its
// session's previous poll + interval, over polls by the same worker as the
// previous one.
func (p *pollLog) steadyLateness(intervals map[string]time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return steadyLateness(p.polls, intervals)
}

// steadyLateness is pollLog.steadyLateness of polls.
func steadyLateness(polls map[string][]pollAt, intervals map[string]time.Duration) time.Duration {
	var worst time.Duration
	for id, ps := range polls {
		for i := 1; i < len(ps); i++ {
			if ps[i].worker == ps[i-1].worker {
				worst = max(worst, ps[i].at.Sub(ps[i-1].at)-intervals[id])
			}
		}
	}
	return worst
}
