package poller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// badDataObserver counts BadData reports by kind.
type badDataObserver struct {
	NopObserver
	mu     sync.Mutex
	counts map[string]int
}

func (o *badDataObserver) BadData(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[string]int{}
	}
	o.counts[kind]++
}

func (o *badDataObserver) count(kind string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[kind]
}

// TestStatefulCorruptStateIsPolledAsNeverSaved: a state key of the wrong
// type and a state hash with a garbage token, loaded in the same batch as a
// readable one, are polled as never saved (the old code failed the whole
// load at every try: "state load failed; the poll waits for it", never
// polled), reported once each (log and BadData), and overwritten by the
// first save.
func TestStatefulCorruptStateIsPolledAsNeverSaved(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	keys := keyspace.Space{}
	putSessions(t, client, map[string]time.Duration{"str": 100 * time.Millisecond, "tok": 100 * time.Millisecond, "fine": 100 * time.Millisecond})
	require.NoError(t, client.Set(ctx, keys.State("str"), "garbage", 0).Err())
	require.NoError(t, client.HSet(ctx, keys.State("tok"), "data", "7", "token", "garbage", "saved", "x", "polled", "x").Err())

	core, logs := observer.New(zap.InfoLevel)
	obs := &badDataObserver{}
	log := newCursorLog()
	cfg := stateful(fastConfig(client, "w", log.poller("w")))
	cfg.Logger, cfg.Observer = zap.New(core), obs
	start(t, cfg)
	require.Eventually(t, func() bool {
		return len(log.of("str")) >= 3 && len(log.of("tok")) >= 3 && len(log.of("fine")) >= 3
	}, 10*time.Second, 10*time.Millisecond, "every session polled, the corrupt ones too")
	log.check(t) // the corrupt ones' first poll saw no state (cursor 0), then their own saves
	require.Equal(t, 2, obs.count(BadDataState))
	corrupt := logs.FilterField(zap.String("event", "corrupt_state"))
	require.Equal(t, 2, corrupt.Len(), "logged once per session")
	// A load may time out on a loaded machine (RequestTimeout is 100ms
	// here) and is tried again; it never fails for the corrupt records.
	for _, e := range logs.FilterMessage("state load failed; the poll waits for it").All() {
		require.Regexp(t, "deadline exceeded|timeout", e.ContextMap()["error"], "a state load failed for the corrupt records")
	}
	for _, id := range []string{"str", "tok"} {
		typ, err := client.Type(ctx, keys.State(id)).Result()
		require.NoError(t, err)
		require.Equal(t, "hash", typ, "overwritten by the first save")
	}
}

// TestNoteStateOncePerSessionAndProblem: a corrupt state is reported once
// per session and problem, again only after a readable load or with
// another problem.
func TestNoteStateOncePerSessionAndProblem(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	obs := &badDataObserver{}
	c := &turns{bad: &badData{obs: obs, log: zap.New(core)}}
	steps := []struct {
		session, problem string
		wantLogs         int
	}{
		{"a", "", 0},
		{"a", "p", 1},
		{"a", "p", 1},
		{"b", "p", 2},
		{"a", "q", 3},
		{"a", "", 3},
		{"a", "q", 4},
		{"b", "p", 4},
	}
	for i, s := range steps {
		c.bad.noteState(s.session, s.problem)
		require.Equal(t, s.wantLogs, logs.Len(), "step %d", i)
		require.Equal(t, s.wantLogs, obs.count(BadDataState), "step %d", i)
	}
}

// TestJunkMembersTakeNoSessions: unexpired entries of the node index that
// are not live workers (a valid id without a heartbeat key, invalid ids)
// take no session: the one real worker polls every session (before, the
// junk took their share, polled by nobody), and each entry is reported
// once.
func TestJunkMembersTakeNoSessions(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	until := float64(time.Now().Add(time.Hour).UnixMilli())
	junk := []string{"ghost", "bad id with spaces", "", strings.Repeat("x", 5000), "ünï©ødé"}
	for _, j := range junk {
		require.NoError(t, client.ZAdd(ctx, keyspace.Space{}.NodeIndex(), redis.Z{Score: until, Member: j}).Err())
	}
	ids := addSessions(t, client, 40, 50*time.Millisecond)
	core, logs := observer.New(zap.InfoLevel)
	obs := &badDataObserver{}
	rec := newRecorder()
	cfg := fastConfig(client, "w", rec.poller("w"))
	cfg.Logger, cfg.Observer, cfg.DiscoveryInterval = zap.New(core), obs, 200*time.Millisecond
	start(t, cfg)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec.polled(id) == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every session polled by the only live worker")
	require.Eventually(t, func() bool { return obs.count(BadDataMember) == len(junk) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, len(junk), logs.FilterField(zap.String("event", "junk_member")).Len())
}

// TestNoteJunkOnceSeenTwice: a junk member is reported when two reads in a
// row saw it, once, and again only after it was gone.
func TestNoteJunkOnceSeenTwice(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	obs := &badDataObserver{}
	c := &turns{bad: &badData{obs: obs, log: zap.New(core)}}
	j := func(ms ...string) []nodes.Junk {
		var out []nodes.Junk
		for _, m := range ms {
			out = append(out, nodes.Junk{Member: m, Problem: "p"})
		}
		return out
	}
	reads := []struct {
		junk     []nodes.Junk
		wantLogs int
	}{
		{j("a"), 0},      // once: maybe a worker leaving
		{nil, 0},         // it was
		{j("a", "b"), 0}, // first sight of both
		{j("a", "b"), 2},
		{j("a", "b"), 2},
		{j("b"), 2},
		{j("a", "b"), 2}, // a back: first sight again
		{j("a", "b"), 3},
		{nil, 3},
		{j("b"), 3},
		{j("b"), 4},
	}
	var prev []nodes.Junk
	for i, r := range reads {
		c.bad.noteJunk(prev, r.junk)
		prev = r.junk
		require.Equal(t, r.wantLogs, logs.Len(), "read %d", i)
		require.Equal(t, r.wantLogs, obs.count(BadDataMember), "read %d", i)
	}
}
