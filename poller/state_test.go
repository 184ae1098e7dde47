package poller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	"github.com/pollworker/pollworker/scripts/lua"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// cursorLog records every poll of cursorPollers: each poll reads the
// cursor (a counter) saved last and saves the next one.
type cursorLog struct {
	mu    sync.Mutex
	polls map[string][]cursorPoll
	plain atomic.Int64 // polls without a SessionState (Config.Stateful must give every poll one)
}

type cursorPoll struct {
	pollAt            // worker, start, token (of the poll's lease), schedule handed over
	seen, saved int   // cursor read from SessionState.Last, and saved (-1: the save failed)
	err         error // of the save
}

type cursorPoller struct {
	log    *cursorLog
	worker string
}

func (p cursorPoller) Poll(ctx context.Context, tn *Turn) error {
	s, l, st := tn.Session(), tn.lease, tn.State()
	if st == nil {
		p.log.plain.Add(1)
		return errors.New("Poll without State under Config.Stateful")
	}
	at := time.Now()
	seen := 0
	if d := st.Last().Data; d != nil {
		n, err := strconv.Atoi(string(d))
		if err != nil {
			return err
		}
		seen = n
	}
	p.log.mu.Lock()
	before := p.log.polls[s.ID]
	var last []pollAt
	if len(before) > 0 {
		last = []pollAt{before[len(before)-1].pollAt}
	}
	p.log.mu.Unlock()
	cp := cursorPoll{pollAt: newPollAt(p.worker, tn, at, last), seen: seen, saved: seen + 1}
	if cp.err = st.Save(ctx, []byte(strconv.Itoa(seen+1))); cp.err != nil {
		cp.saved = -1
	} else if got := st.Last(); string(got.Data) != strconv.Itoa(seen+1) || got.Token != l.Token() {
		cp.err = fmt.Errorf("Last after Save: %q token %d", got.Data, got.Token)
	}
	p.log.mu.Lock()
	p.log.polls[s.ID] = append(p.log.polls[s.ID], cp)
	p.log.mu.Unlock()
	return cp.err
}

// stateful is cfg with Config.Stateful set.
func stateful(cfg Config) Config {
	cfg.Stateful = true
	return cfg
}

func newCursorLog() *cursorLog { return &cursorLog{polls: map[string][]cursorPoll{}} }

func (c *cursorLog) poller(worker string) Poller { return cursorPoller{log: c, worker: worker} }

func (c *cursorLog) of(id string) []cursorPoll {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cursorPoll(nil), c.polls[id]...)
}

func (c *cursorLog) polledBy(id, worker string) bool {
	for _, p := range c.of(id) {
		if p.worker == worker {
			return true
		}
	}
	return false
}

// check verifies every session's history: every poll saw the cursor the
// last save before it left (across handoffs too), tokens never went
// backwards, and every poll had its SessionState. A save may fail only by
// its poll's context being cancelled, as it is the moment the lease
// becomes uncertain (a renewal slower than the request timeout, on a
// loaded machine): it may or may not have been written, so the next poll
// may see either cursor.
func (c *cursorLog) check(t *testing.T) {
	t.Helper()
	require.Zero(t, c.plain.Load(), "Poll without State under Config.Stateful")
	c.mu.Lock()
	defer c.mu.Unlock()
	cancelled := 0
	for id, ps := range c.polls {
		may := []int{0} // the cursors the next poll may see; the first poll ever sees none
		for i, p := range ps {
			require.Contains(t, may, p.seen, "%s poll %d by %s (token %d) sees cursor %d, not what the saves before left %v",
				id, i, p.worker, p.token, p.seen, may)
			switch {
			case p.err == nil:
				may = []int{p.saved}
			case errors.Is(p.err, context.Canceled) && p.saved == -1:
				cancelled++
				may = []int{p.seen, p.seen + 1}
			default:
				require.NoError(t, p.err, "%s poll %d by %s", id, i, p.worker)
			}
			if i > 0 {
				require.GreaterOrEqual(t, p.token, ps[i-1].token, "%s: token went backwards", id)
			}
		}
	}
	if cancelled > 0 {
		t.Logf("%d saves cancelled with their poll (lease uncertain)", cancelled)
	}
}

// steadyLateness is pollLog.steadyLateness of the cursor polls.
func (c *cursorLog) steadyLateness(intervals map[string]time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	polls := make(map[string][]pollAt, len(c.polls))
	for id, ps := range c.polls {
		for _, p := range ps {
			polls[id] = append(polls[id], p.pollAt)
		}
	}
	return steadyLateness(polls, intervals)
}

// moves returns, per session, the gaps between the last poll of one worker
// and the first poll of the next, with that first poll.
func (c *cursorLog) moves(id string) (gaps []time.Duration, firsts []cursorPoll) {
	ps := c.of(id)
	for i := 1; i < len(ps); i++ {
		if ps[i].worker != ps[i-1].worker {
			gaps = append(gaps, ps[i].at.Sub(ps[i-1].at))
			firsts = append(firsts, ps[i])
		}
	}
	return gaps, firsts
}

func putSessions(t *testing.T, client redis.UniversalClient, intervals map[string]time.Duration) {
	t.Helper()
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	_, err = lease.MarkFresh(context.Background(), client, keyspace.Space{})
	require.NoError(t, err)
	for id, iv := range intervals {
		require.NoError(t, store.Put(context.Background(), session.Session{ID: id,
			URL: "http://127.0.0.1:1/" + id, Interval: session.Duration(iv)}))
	}
}

// TestStatefulGracefulHandoff: sessions move by a join and then by a
// graceful stop; at each move the successor's first poll sees the cursor
// its predecessor saved last, and comes at the due time the predecessor
// handed over, one interval after its last poll
// (requireScheduleHandedOver, as in TestGracefulHandoffKeepsTheSchedule).
func TestStatefulGracefulHandoff(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	intervals := map[string]time.Duration{}
	for i := range 12 {
		// 0.6s to 1.2s: the spread step (at most a tenth of the interval)
		// leaves most of the 250ms to the handoff itself under -race.
		intervals[fmt.Sprintf("cur-%d", i)] = time.Duration(3+i%4) * 200 * time.Millisecond
	}
	putSessions(t, client, intervals)
	log := newCursorLog()
	shaken := newShakenLeases()
	cfg := func(id string) Config {
		c := stateful(fastConfig(client, id, log.poller(id)))
		c.BalanceSlack = -1
		c.Observer = shaken.observer()
		return c
	}
	a := start(t, cfg("a"))
	require.Eventually(t, func() bool {
		for id := range intervals {
			if len(log.of(id)) < 2 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "a polls every session twice")
	start(t, cfg("b"))
	moved := func() int {
		n := 0
		for id := range intervals {
			if log.polledBy(id, "b") {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return moved() >= 3 }, 30*time.Second, 10*time.Millisecond, "b takes its share")
	a.stop(t)
	require.Eventually(t, func() bool { return moved() == len(intervals) }, 30*time.Second, 10*time.Millisecond,
		"b polls every session once a has stopped")

	steady := log.steadyLateness(intervals)
	t.Logf("worst lateness of polls without a handoff: %v", steady)
	for id, iv := range intervals {
		gaps, firsts := log.moves(id)
		require.Len(t, gaps, 1, "%s moved once", id)
		require.Equal(t, "b", firsts[0].worker)
		ps := log.of(id)
		i := slices.IndexFunc(ps, func(p cursorPoll) bool { return p.worker == "b" })
		requireScheduleHandedOver(t, id, iv, ps[i-1].pollAt, ps[i].pollAt, steady, fastConfig(nil, "x", nil).LeaseTTL, shaken.of(id))
	}
	log.check(t)
}

// TestStatefulCrashTakeoverKeepsSchedule: worker a is cut off from Redis
// (a crash, as far as the fleet can tell: no release, no handoff mark)
// right after it polled and saved; b takes the sessions when a's leases
// expire, and its first poll of each sees a's last cursor and comes when
// the saved record says the next poll was due, not at once (within 250ms
// plus, for a loaded machine, four times the worst lateness of b's own
// next polls).
func TestStatefulCrashTakeoverKeepsSchedule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	const iv = 2500 * time.Millisecond // longer than a takeover (TTL 900ms + a round)
	intervals := map[string]time.Duration{"crash-0": iv, "crash-1": iv, "crash-2": iv}
	putSessions(t, client, intervals)
	proxy, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })

	log := newCursorLog()
	start(t, stateful(fastConfig(viaProxy, "a", log.poller("a"))))
	require.Eventually(t, func() bool {
		for id := range intervals {
			if len(log.of(id)) < 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, time.Millisecond, "a polls every session")
	proxy.Partition() // a "crashes": it neither renews nor releases
	cut := time.Now()

	start(t, stateful(fastConfig(client, "b", log.poller("b"))))
	require.Eventually(t, func() bool {
		for id := range intervals {
			if !log.polledBy(id, "b") {
				return false
			}
		}
		return true
	}, 15*time.Second, 10*time.Millisecond, "b takes every session")
	require.Eventually(t, func() bool {
		for id := range intervals {
			if ps := log.of(id); len(ps) < 3 || ps[len(ps)-1].worker != "b" || ps[len(ps)-2].worker != "b" {
				return false
			}
		}
		return true
	}, 15*time.Second, 10*time.Millisecond, "b polls every session twice")
	steady := log.steadyLateness(intervals)
	t.Logf("worst lateness of b's polls after its first: %v", steady)
	for id := range intervals {
		gaps, firsts := log.moves(id)
		require.Len(t, gaps, 1, "%s moved once", id)
		t.Logf("%s: b's first poll %v after the cut, %v after a's last", id, firsts[0].at.Sub(cut).Round(time.Millisecond), gaps[0].Round(time.Millisecond))
		require.Greater(t, firsts[0].at.Sub(cut), 900*time.Millisecond, "%s: b polled before a's lease expired", id)
		require.GreaterOrEqual(t, gaps[0], iv-50*time.Millisecond, "%s polled early after the crash takeover", id)
		require.LessOrEqual(t, gaps[0], iv+250*time.Millisecond+4*steady, "%s polled late after the crash takeover", id)
	}
	log.check(t)
}

// TestStatefulPollerStateMissingOrLate: a session saved long ago (more than
// an interval) or never is polled at once on acquisition.
func TestStatefulPollerPollsAtOnceWhenTheSavedPollIsOld(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	// A long interval: "at once" and "an interval later" stay far apart
	// however slow the machine, and the wait ends at the first polls.
	const iv = 30 * time.Second
	putSessions(t, client, map[string]time.Duration{"old": iv, "never": iv})
	// "old" was saved, by an earlier lease, more than an interval ago.
	m, err := lease.New(lease.Config{Client: client, Holder: "earlier", TTL: time.Second, LossQuarantine: -1})
	require.NoError(t, err)
	r := m.Acquire(context.Background(), []string{"old"})
	require.NotNil(t, r[0].Lease)
	_, err = state.NewStore(client, keyspace.Space{}).Save(context.Background(), r[0].Lease, time.Now().Add(-2*iv), []byte("41"))
	require.NoError(t, err)
	require.NoError(t, m.Release(context.Background(), r[0].Lease))
	require.NoError(t, client.HDel(context.Background(), keyspace.Space{}.Fencing("old"), keyspace.FieldHandoff).Err()) // as after a crash

	log := newCursorLog()
	began := time.Now()
	start(t, stateful(fastConfig(client, "w", log.poller("w"))))
	require.Eventually(t, func() bool { return len(log.of("old")) > 0 && len(log.of("never")) > 0 },
		iv/2, 5*time.Millisecond, "both polled at once, not an interval later")
	require.Equal(t, 41, log.of("old")[0].seen)
	require.Less(t, log.of("old")[0].at.Sub(began), iv/2)
}

// TestPlainPollerReadsNoState: a Poller without Config.Stateful costs no
// state read.
func TestPlainPollerReadsNoState(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	hook := &scriptCounter{sha: redis.NewScript(lua.StateLoad).Hash()}
	client.AddHook(hook)
	ids := addSessions(t, client, 5, 50*time.Millisecond)
	rec := newRecorder()
	c := start(t, fastConfig(client, "w", rec.poller("w")))
	require.Nil(t, c.c.cfg.StateStore)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec.polled(id) < 3 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond) // seconds under -race on a loaded machine
	require.Zero(t, hook.n.Load())

	// The same counter does see the loads under Config.Stateful.
	log := newCursorLog()
	start(t, stateful(fastConfig(client, "s", log.poller("s"))))
	require.Eventually(t, func() bool { return hook.n.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestStatefulLoadsAreBatched: a worker taking 300 sessions at once reads
// their states in a few script calls (LoadBatched), not 300: 3 to 6 on a
// quiet machine; the bound, a quarter of 300, leaves room for a loaded one,
// where acquisitions arrive more spread out (43 was seen with three test
// packages under -race at once) and still fails without batching.
func TestStatefulLoadsAreBatched(t *testing.T) {
	client := redistest.Start(t).Client(t)
	hook := &scriptCounter{sha: redis.NewScript(lua.StateLoad).Hash()}
	client.AddHook(hook)
	ids := addSessions(t, client, 300, time.Second)
	log := newCursorLog()
	start(t, stateful(fastConfig(client, "w", log.poller("w"))))
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if len(log.of(id)) == 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, hook.n.Load(), int64(75), "300 sessions' states read in %d script calls", hook.n.Load())
	t.Logf("300 sessions' states read in %d script calls", hook.n.Load())
	log.check(t)
}

// scriptCounter counts the commands (alone or pipelined) that run one script.
type scriptCounter struct {
	sha string
	n   atomic.Int64
}

func (h *scriptCounter) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && a[1] == h.sha {
			h.n.Add(1)
		}
	}
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// TestStateLoadFailureIsRetriedSoon: a state load that fails (a Redis
// timeout) is no failure of the target: the load is tried again within a
// second, not an interval and a backoff later (it was, and a session at
// 30 s waited 30 s or more for its first poll).
func TestStateLoadFailureIsRetriedSoon(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	const iv = 30 * time.Second
	putSessions(t, client, map[string]time.Duration{"a": iv})
	hook := &failScript{sha: redis.NewScript(lua.StateLoad).Hash()}
	hook.left.Store(2)
	client.AddHook(hook)
	log := newCursorLog()
	start(t, stateful(fastConfig(client, "w", log.poller("w"))))
	require.Eventually(t, func() bool { return len(log.of("a")) > 0 }, iv/2, 5*time.Millisecond,
		"polled after the failed loads, not an interval later")
	require.LessOrEqual(t, hook.left.Load(), int64(0), "the loads failed first")
}

// TestSessionStateDecodesEachRecordOnce: Decoded calls decode once per
// record, keeps its error as well as its value, and decodes again after
// the record changes (setLast, as a load or a Save does).
func TestSessionStateDecodesEachRecordOnce(t *testing.T) {
	calls := 0
	decode := func(data []byte) (any, error) {
		calls++
		if string(data) == "bad" {
			return nil, errors.New("unreadable")
		}
		return string(data), nil
	}
	st := &SessionState{}
	for _, step := range []struct {
		data      string
		token     int64
		want      any
		wantErr   bool
		wantCalls int
	}{
		{"", 0, "", false, 1}, // never saved: decode sees no data
		{"a", 1, "a", false, 2},
		{"bad", 2, nil, true, 3},
		{"b", 3, "b", false, 4},
	} {
		if step.token > 0 {
			st.mu.Lock()
			st.setLast(state.Record{Data: []byte(step.data), Token: step.token})
			st.mu.Unlock()
		}
		for range 3 {
			rec, v, err := st.Decoded(decode)
			require.Equal(t, step.token, rec.Token)
			require.Equal(t, step.want, v)
			require.Equal(t, step.wantErr, err != nil, "%v", err)
		}
		require.Equal(t, step.wantCalls, calls, "decode calls after record %q", step.data)
	}
}

// TestSaveThatFindsTheLeaseGoneEndsItAtOnce: a state save whose script
// finds the lease key missing (Redis lost it) ends the lease at once: the
// poll loop stops and the session is taken again, with a new token. Before,
// the worker went on polling under it until its next renewal: a helper saw
// 4,700 polls in 7 s after a Redis restart, each save refused. Renewals
// are a minute apart here, so only a save can have found it. (The 3-minute
// lease with fastConfig's 150 ms heartbeat checks heartbeatFresh too:
// before it, such a worker was never live and took no session.)
func TestSaveThatFindsTheLeaseGoneEndsItAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	putSessions(t, client, map[string]time.Duration{"gone-0": 100 * time.Millisecond})
	log := newCursorLog()
	events := &reportLog{}
	cfg := stateful(fastConfig(client, "a", log.poller("a")))
	// A 3-minute quarantine: one lease key deleted is no data loss (the
	// loss marker is there), and the session is taken again at once.
	cfg.LeaseTTL, cfg.RenewInterval, cfg.Observer = 3*time.Minute, time.Minute, events
	start(t, cfg)
	require.Eventually(t, func() bool { return len(log.of("gone-0")) >= 2 }, 30*time.Second, time.Millisecond)
	first := log.of("gone-0")[0].token

	require.NoError(t, client.Del(context.Background(), keyspace.Space{}.Lease("gone-0")).Err())
	require.Eventually(t, func() bool {
		polls := log.of("gone-0")
		return polls[len(polls)-1].token > first
	}, 30*time.Second, time.Millisecond, "polled again under a new lease")

	events.mu.Lock()
	defer events.mu.Unlock()
	var lost []Event
	for _, e := range events.events {
		if e.Type == EventLost {
			lost = append(lost, e)
		}
	}
	require.Len(t, lost, 1)
	require.Equal(t, first, lost[0].Token)
	require.Contains(t, lost[0].Reason, "a write fenced by the lease found it held by another owner value, or missing")
	refused := 0
	for _, p := range log.of("gone-0") {
		if p.token == first && errors.Is(p.err, state.ErrNotHeld) {
			refused++
		}
	}
	require.Equal(t, 1, refused, "one save refused, then no poll under the lost lease")
}
