package poller

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/faultproxy"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// slotLog records every poll of scheduled sessions: its slot, worker and
// wall-clock start, and whether two polls of a session ever overlapped.
type slotLog struct {
	mu       sync.Mutex
	polls    map[string][]slotPoll
	running  map[string]int
	overlaps int
	hold     time.Duration // how long each poll takes
}

type slotPoll struct {
	worker  string
	slot    time.Time
	started time.Time
}

func newSlotLog() *slotLog {
	return &slotLog{polls: map[string][]slotPoll{}, running: map[string]int{}}
}

func (p *slotLog) poller(worker string) Poller {
	return PollFunc(func(ctx context.Context, tn *Turn) error {
		s := tn.Session()
		now := time.Now()
		slot, ok := SlotOf(ctx)
		p.mu.Lock()
		if !ok {
			slot = time.Time{}
		}
		p.polls[s.ID] = append(p.polls[s.ID], slotPoll{worker, slot, now})
		if p.running[s.ID]++; p.running[s.ID] > 1 {
			p.overlaps++
		}
		hold := p.hold
		p.mu.Unlock()
		if hold > 0 {
			select {
			case <-time.After(hold):
			case <-ctx.Done():
			}
		}
		p.mu.Lock()
		p.running[s.ID]--
		p.mu.Unlock()
		return nil
	})
}

// slots returns the slots polled for id, in the order polled.
func (p *slotLog) slots(id string) []slotPoll {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]slotPoll(nil), p.polls[id]...)
}

// slotCounter is an Observer that counts slots.
type slotCounter struct {
	NopObserver
	started  atomic.Int64
	overlap  atomic.Int64
	catchUp  atomic.Int64
	maxLate  atomic.Int64
	negative atomic.Int64 // slots started before their time
}

func (o *slotCounter) SlotStarted(late time.Duration) {
	o.started.Add(1)
	if late < 0 {
		o.negative.Add(1)
	}
	for {
		cur := o.maxLate.Load()
		if int64(late) <= cur || o.maxLate.CompareAndSwap(cur, int64(late)) {
			return
		}
	}
}

func (o *slotCounter) SlotsSkipped(n int, reason string) {
	if reason == SkipOverlap {
		o.overlap.Add(int64(n))
	} else {
		o.catchUp.Add(int64(n))
	}
}

func addScheduled(t *testing.T, client redis.UniversalClient, ids []string, s session.Session) {
	t.Helper()
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	_, err = lease.MarkFresh(context.Background(), client, keyspace.Space{})
	require.NoError(t, err)
	for _, id := range ids {
		s.ID, s.URL = id, "http://127.0.0.1:1/"+id
		require.NoError(t, store.Put(context.Background(), s))
	}
}

// requireSlotsOnce checks the polls of one session: each carries its slot,
// none starts before its slot, and no slot runs twice.
func requireSlotsOnce(t *testing.T, id string, polls []slotPoll) {
	t.Helper()
	seen := map[time.Time]bool{}
	for _, p := range polls {
		require.False(t, p.slot.IsZero(), "%s: a poll without X-Poll-Slot", id)
		require.False(t, p.started.Before(p.slot), "%s: slot %v polled early, at %v", id, p.slot, p.started)
		require.False(t, seen[p.slot], "%s: slot %v polled twice", id, p.slot)
		seen[p.slot] = true
	}
}

// TestScheduledSessionPollsEachSlotOnce: a session on "* * * * * *" is
// polled once per slot it runs, never before the slot, with the slot in
// the poll's context; its state records the last slot started and
// finished (issue 25 item 3).
func TestScheduledSessionPollsEachSlotOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := []string{"cron-a", "cron-b"}
	addScheduled(t, client, ids, session.Session{Schedule: "* * * * * *"})
	log := newSlotLog()
	obs := &slotCounter{}
	cfg := fastConfig(client, "a", log.poller("a"))
	cfg.Observer = obs
	cfg.StateStore = state.NewStore(client, keyspace.Space{})
	start(t, cfg)
	require.Eventually(t, func() bool { return len(log.slots("cron-a")) >= 2 && len(log.slots("cron-b")) >= 2 },
		20*time.Second, 10*time.Millisecond)
	for _, id := range ids {
		polls := log.slots(id)
		requireSlotsOnce(t, id, polls)
		for i := 1; i < len(polls); i++ {
			require.True(t, polls[i].slot.After(polls[i-1].slot), "%s: slots run in order", id)
		}
	}
	require.Zero(t, obs.negative.Load(), "no slot started before its time")
	require.Zero(t, log.overlaps)
	t.Logf("slots started %d, longest lateness %v", obs.started.Load(), time.Duration(obs.maxLate.Load()))

	require.Eventually(t, func() bool {
		saved, err := cfg.StateStore.LoadSlots(context.Background(), "cron-a")
		require.NoError(t, err)
		return !saved.Finished.IsZero() && saved.Outcome == "ok" && !saved.Started.Before(saved.Finished)
	}, 5*time.Second, 10*time.Millisecond)
}

// TestScheduledSlotsCarriedByAGracefulHandoff: with catchup all, a session
// handed from a to b by a graceful stop runs every slot from its first to
// its last exactly once, across the two workers, whatever the handoff
// took.
func TestScheduledSlotsCarriedByAGracefulHandoff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := []string{"h-1", "h-2", "h-3"}
	addScheduled(t, client, ids, session.Session{Schedule: "* * * * * *", CatchUp: "all"})
	log := newSlotLog()
	store := state.NewStore(client, keyspace.Space{})
	cfg := func(id string) Config {
		c := fastConfig(client, id, log.poller(id))
		c.StateStore = store
		c.BalanceSlack = -1
		return c
	}
	a := start(t, cfg("a"))
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if len(log.slots(id)) < 1 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	start(t, cfg("b"))
	a.stop(t)
	byB := func(id string) int {
		n := 0
		for _, p := range log.slots(id) {
			if p.worker == "b" {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if byB(id) < 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	for _, id := range ids {
		polls := log.slots(id)
		requireSlotsOnce(t, id, polls)
		sort.Slice(polls, func(i, j int) bool { return polls[i].slot.Before(polls[j].slot) })
		for i := 1; i < len(polls); i++ {
			require.Equal(t, time.Second, polls[i].slot.Sub(polls[i-1].slot), "%s: slot after %v missing", id, polls[i-1].slot)
		}
	}
}

// TestScheduledOverlapSkips: a poll longer than the slot spacing never
// runs beside the next slot: the slots due while it runs are skipped and
// counted, and the slot after them runs.
func TestScheduledOverlapSkips(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	addScheduled(t, client, []string{"slow"}, session.Session{Schedule: "* * * * * *"})
	log := newSlotLog()
	log.hold = 2500 * time.Millisecond
	obs := &slotCounter{}
	cfg := fastConfig(client, "a", log.poller("a"))
	cfg.Observer = obs
	cfg.LeaseTTL, cfg.RenewInterval = 3*time.Second, 500*time.Millisecond
	start(t, cfg)
	require.Eventually(t, func() bool { return len(log.slots("slow")) >= 2 }, 20*time.Second, 10*time.Millisecond)
	polls := log.slots("slow")
	requireSlotsOnce(t, "slow", polls)
	require.Zero(t, log.overlaps, "never two polls of a session at once")
	require.GreaterOrEqual(t, polls[1].slot.Sub(polls[0].slot), 2*time.Second, "the slots due during the first poll were skipped")
	require.GreaterOrEqual(t, obs.overlap.Load(), int64(2), "and counted")
}

// TestScheduledSlotsCaughtUpAfterAFleetStop: with catchup all, the slots
// due while the whole fleet was stopped run once each, in order, when a
// worker comes back within the lease TTL, while the graceful handoff mark
// of the last holder still stands. The mark's next poll time is overdue
// then, and Redis reports it as "now": it used to set the successor's
// cursor to the latest slot before now, so every slot of the outage was
// silently dropped (seen by hand with the default 30 s TTL and a 10 s stop).
func TestScheduledSlotsCaughtUpAfterAFleetStop(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := []string{"out-1", "out-2"}
	addScheduled(t, client, ids, session.Session{Schedule: "* * * * * *", CatchUp: "all"})
	log := newSlotLog()
	store := state.NewStore(client, keyspace.Space{})
	cfg := func(id string) Config {
		c := fastConfig(client, id, log.poller(id))
		c.StateStore = store
		c.LeaseTTL = 20 * time.Second // the handoff mark outlives the outage
		return c
	}
	a := start(t, cfg("a"))
	require.Eventually(t, func() bool { return len(log.slots("out-1")) >= 2 && len(log.slots("out-2")) >= 2 },
		20*time.Second, 10*time.Millisecond)
	a.stop(t)
	stopped := time.Now()
	// The outage: at least two slots pass with nobody running.
	require.Eventually(t, func() bool { return time.Since(stopped) > 2500*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	start(t, cfg("b"))
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if n := len(log.slots(id)); n == 0 || log.slots(id)[n-1].started.Before(stopped.Add(4*time.Second)) {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "b runs slots after the outage")
	for _, id := range ids {
		polls := log.slots(id)
		requireSlotsOnce(t, id, polls)
		for i := 1; i < len(polls); i++ {
			require.Equal(t, time.Second, polls[i].slot.Sub(polls[i-1].slot), "%s: slot after %v missing (or out of order)", id, polls[i-1].slot)
		}
	}
}

// TestScheduledSlotsOwedAndNotOwed, with catchup all on "* * * * * *":
//   - a session removed for a few slots and added again, and one paused
//     and resumed, run none of the slots due meanwhile: the record of the
//     slots run before does not carry over (state.Slots.Cut). Before, the
//     holder resumed from the last slot finished and ran each of them at
//     once;
//   - while the slot started cannot be recorded (the state's connection is
//     cut, the lease's is not), no slot runs; once it can, the slots
//     missed run, each once. Before, a slot ran unrecorded and ran again
//     under the next holder, or under the same worker once it took the
//     lease again after a Redis stall.
func TestScheduledSlotsOwedAndNotOwed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	def := session.Session{Schedule: "* * * * * *", CatchUp: "all"}
	addScheduled(t, client, []string{"gone", "paused"}, def)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	proxy, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	log := newSlotLog()
	cfg := fastConfig(client, "a", log.poller("a"))
	cfg.StateStore = state.NewStore(viaProxy, keyspace.Space{})
	start(t, cfg)
	ctx := context.Background()
	polled := func(id string, n int) func() bool { return func() bool { return len(log.slots(id)) >= n } }
	require.Eventually(t, polled("gone", 2), 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, polled("paused", 2), 20*time.Second, 10*time.Millisecond)

	// Removed and paused for more than a slot beyond the second rule 7
	// allows.
	require.NoError(t, store.Delete(ctx, "gone"))
	require.NoError(t, store.Pause(ctx, "paused"))
	away := time.Now()
	require.Eventually(t, func() bool { return time.Since(away) > 2500*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	back := time.Now()
	def.ID, def.URL = "gone", "http://127.0.0.1:1/gone"
	require.NoError(t, store.Put(ctx, def))
	require.NoError(t, store.Resume(ctx, "paused"))
	counts := map[string]int{"gone": len(log.slots("gone")), "paused": len(log.slots("paused"))}
	for id, n := range counts {
		require.Eventually(t, polled(id, n+2), 20*time.Second, 10*time.Millisecond, "%s polled again", id)
	}
	for id := range counts {
		for _, p := range log.slots(id) {
			absent := p.slot.After(away.Add(time.Second)) && p.slot.Before(back)
			require.False(t, absent, "%s: slot %v, due while it was removed or paused (%v to %v), polled at %v",
				id, p.slot, away, back, p.started)
		}
	}

	// The state's connection cut for two slots.
	proxy.Partition()
	cut := time.Now()
	require.Eventually(t, func() bool { return time.Since(cut) > 2200*time.Millisecond }, 10*time.Second, 10*time.Millisecond)
	proxy.Heal()
	healed := time.Now()
	counts = map[string]int{"gone": len(log.slots("gone")), "paused": len(log.slots("paused"))}
	for id, n := range counts {
		require.Eventually(t, polled(id, n+2), 20*time.Second, 10*time.Millisecond, "%s polled after the cut", id)
	}
	for id := range counts {
		polls := log.slots(id)
		requireSlotsOnce(t, id, polls)
		for _, p := range polls {
			if p.slot.After(cut.Add(time.Second)) {
				require.False(t, p.started.Before(healed), "%s: slot %v polled at %v, while its record could not be written (%v to %v)",
					id, p.slot, p.started, cut, healed)
			}
		}
	}
}
