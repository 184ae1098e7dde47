package fleet

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// TestExplainWhy is the reasoning of explain: facts in, one reason and sentence
// out.
func TestExplainWhy(t *testing.T) {
	active := &Definition{IntervalMs: 1000}
	ranking := []RankedWorker{{ID: "w1"}, {ID: "w2"}, {ID: "w3"}}
	base := func(f func(e *Explanation)) Explanation {
		e := Explanation{Session: "s1", Found: true, Definition: active, Ranking: ranking, Planned: "w1", Watcher: "w2",
			LeaseTTLMs: 30000, Loss: LossFacts{Present: true, RunID: "r1", ServerRunID: "r1"}}
		f(&e)
		return e
	}
	held := func(holder string, mod ...func(l *LeaseFacts)) func(e *Explanation) {
		return func(e *Explanation) {
			e.Lease = &LeaseFacts{Holder: holder, Incarnation: "i1", Live: true, Current: true, ExpiresInMs: 25000, AcquiredAgoMs: 60000}
			for _, m := range mod {
				m(e.Lease)
			}
		}
	}
	tests := []struct {
		name       string
		give       Explanation
		wantReason string
		wantWhy    string
	}{
		{name: "preferred", give: base(held("w1")), wantReason: ReasonPreferred, wantWhy: "preferred owner: w1 polls it, as planned (its rendezvous owner)"},
		{name: "moved by the bound", give: base(func(e *Explanation) {
			e.Planned, e.MovedByBound, e.Watcher = "w2", true, "w1"
			held("w2")(e)
		}), wantReason: ReasonPreferred, wantWhy: "balance bound moved its bucket off its rendezvous owner w1"},
		{name: "not found", give: base(func(e *Explanation) { e.Found, e.Definition = false, nil }),
			wantReason: ReasonNotFound, wantWhy: "session not found: no definition is stored under this id"},
		{name: "not found, lease left", give: base(func(e *Explanation) {
			e.Found, e.Definition = false, nil
			held("w3")(e)
		}), wantReason: ReasonNotFound, wantWhy: "w3 still holds its lease and releases it at its next round"},
		{name: "malformed", give: base(func(e *Explanation) { e.Definition, e.Malformed = nil, "session: malformed: bad json" }),
			wantReason: ReasonMalformed, wantWhy: "malformed (session: malformed: bad json)"},
		{name: "malformed, still held", give: base(func(e *Explanation) {
			e.Definition, e.Malformed = nil, "session: malformed: bad json"
			held("w2")(e)
		}), wantReason: ReasonMalformed, wantWhy: "no other worker takes it, and w2 polls the definition it read before until it releases it: its stored definition is malformed"},
		{name: "bad index bucket", give: base(func(e *Explanation) { e.BadBucket = "poll:sessions:7" }),
			wantReason: ReasonBadBucket, wantWhy: "no worker polls it: its index bucket poll:sessions:7 is not a set (written around pollworker), so the workers read it as empty"},
		{name: "not indexed", give: base(func(e *Explanation) { e.NotIndexed = true }),
			wantReason: ReasonNotIndexed, wantWhy: "its id is not in its index bucket"},
		{name: "paused", give: base(func(e *Explanation) { e.Definition = &Definition{IntervalMs: 1000, Paused: true} }),
			wantReason: ReasonPaused, wantWhy: "paused: no worker polls it"},
		{name: "paused, lease of a crashed holder", give: base(func(e *Explanation) {
			e.Definition = &Definition{IntervalMs: 1000, Paused: true}
			held("ghost", func(l *LeaseFacts) { l.Live, l.Current = false, false })(e)
		}), wantReason: ReasonPaused, wantWhy: "held by ghost, which is not live, until it expires in 25s"},
		{name: "no worker matches the selector", give: base(func(e *Explanation) {
			e.Definition = &Definition{IntervalMs: 1000, Selector: "zone=eu"}
			e.Ranking, e.Planned, e.Watcher, e.NoMatchingWorker = []RankedWorker{}, "", "", true
		}), wantReason: ReasonNoMatchingWorker, wantWhy: "no live worker matches its selector zone=eu: nobody polls it"},
		{name: "no live worker", give: base(func(e *Explanation) { e.Ranking, e.Planned, e.Watcher = nil, "", "" }),
			wantReason: ReasonNoWorker, wantWhy: "unowned: there is no live worker"},
		{name: "quarantine", give: base(func(e *Explanation) { e.Loss.QuarantineLeftMs = 12000 }),
			wantReason: ReasonQuarantine, wantWhy: "waiting out the loss quarantine (a new keyspace, or Redis lost data): no free lease is taken until it ends in 12s"},
		{name: "marker missing", give: base(func(e *Explanation) { e.Loss = LossFacts{ServerRunID: "r1"} }),
			wantReason: ReasonLossDetected, wantWhy: "the loss marker is missing"},
		{name: "restarted", give: base(func(e *Explanation) { e.Loss.ServerRunID = "r2" }),
			wantReason: ReasonLossDetected, wantWhy: "Redis restarted or failed over since the loss marker was written (run id r1, now r2)"},
		{name: "unowned", give: base(func(*Explanation) {}),
			wantReason: ReasonUnowned, wantWhy: "the planned owner w1 takes it at its next round; if it does not, the watcher w2 adopts it after the orphan grace"},
		{name: "holder not live", give: base(held("ghost", func(l *LeaseFacts) { l.Live, l.Current = false, false })),
			wantReason: ReasonHolderNotLive, wantWhy: "held by ghost, which is not live (crashed or cut off without releasing); w1 takes it when the lease expires in 25s"},
		{name: "previous incarnation", give: base(held("w1", func(l *LeaseFacts) { l.Current = false })),
			wantReason: ReasonPreviousIncarnation, wantWhy: "previous incarnation (i1) of w1"},
		{name: "cordoned", give: base(held("w3", func(l *LeaseFacts) { l.Cordoned = true })),
			wantReason: ReasonCordoned, wantWhy: "w3 polls it but is cordoned"},
		{name: "orphan", give: base(held("w2")), wantReason: ReasonOrphan, wantWhy: "orphan adopted by the watcher: w2 polls it"},
		{name: "held back", give: base(held("w3", func(l *LeaseFacts) { l.AcquiredAgoMs = 10000 })),
			wantReason: ReasonSettling, wantWhy: "w3 took it 10s ago and keeps it for one lease TTL unless the membership changes (settle rule); then it hands it to the planned owner w1, in about 20s"},
		{name: "contended", give: base(held("w3")),
			wantReason: ReasonContended, wantWhy: "contended: w3 polls it but has not handed it off yet; the planned owner w1 takes it once w3 releases it"},
		{name: "contended, token not from the clock", give: base(held("w3", func(l *LeaseFacts) { l.AcquiredAgoMs = -1 })),
			wantReason: ReasonContended, wantWhy: "contended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, why := why(tt.give)
			require.Equal(t, tt.wantReason, reason)
			require.Contains(t, why, tt.wantWhy)
			require.NotContains(t, why, "\n")
		})
	}
}

// world is a fleet of three live workers (w3 labelled zone=eu) with their
// heartbeat incarnations, sessions s1 (no selector), eu1 (zone=eu), mars1
// (zone=mars: nobody matches) and p1 (paused); mod changes what was read.
func world(t *testing.T, mod func(o *Observed)) *Snapshot {
	t.Helper()
	now := time.UnixMilli(1_700_000_000_000)
	o := Observed{
		ServerTime: now,
		Members:    nodes.Membership{Version: 1, Nodes: []string{"w1", "w2", "w3"}, ExpiryMs: []int64{1, 1, 1}, ServerTimeMs: now.UnixMilli()},
		Infos:      []nodes.Info{{ID: "w1", Incarnation: "i1"}, {ID: "w2", Incarnation: "i2"}, {ID: "w3", Incarnation: "i3", Labels: nodes.Labels{"zone": "eu"}}},
		Sessions: []session.Session{
			{ID: "s1", URL: "http://x/", Interval: session.Duration(2 * time.Second)},
			{ID: "eu1", URL: "http://x/", Interval: session.Duration(time.Second), Selector: "zone=eu"},
			{ID: "mars1", URL: "http://x/", Interval: session.Duration(time.Second), Selector: "zone=mars"},
			{ID: "p1", URL: "http://x/", Interval: session.Duration(time.Second), Paused: true},
		},
		Leases:   map[string]lease.Holding{},
		Tokens:   map[string]int64{},
		Marks:    map[string]lease.HandoffMark{},
		Backoffs: map[string]Backoff{},
		Loss:     &Loss{Present: true, Marker: lease.LossMarker{RunID: "r1"}, ServerRunID: "r1"},
	}
	if mod != nil {
		mod(&o)
	}
	s, err := Build(o, Options{BalanceSlack: 0.05, LeaseTTL: 30 * time.Second, FirstPollBound: func(iv time.Duration) time.Duration { return iv }})
	require.NoError(t, err)
	return s
}

// ownerOf is the planned owner of id in the plain world.
func ownerOf(t *testing.T, id string) string { return world(t, nil).OwnerOf(id) }

// notOwner is a live worker other than id's planned owner and watcher.
func notOwner(t *testing.T, id string) string {
	p := world(t, nil).PlanOf(id)
	b := keyspace.BucketOf(id)
	for _, w := range []string{"w1", "w2", "w3"} {
		if w != p.Owner(b) && w != p.Watcher(b) {
			return w
		}
	}
	t.Fatal("no third worker")
	return ""
}

// held gives session id's lease to holder's incarnation inc, acquired ago
// (its token minted from the server clock then).
func held(id, holder, inc string, ago time.Duration) func(o *Observed) {
	return func(o *Observed) {
		o.Leases[id] = lease.Holding{Session: id, Owner: holder + "#" + inc + ".0123456789abcdef", Remaining: 25 * time.Second}
		o.Tokens[id] = o.ServerTime.Add(-ago).UnixMicro()
	}
}

// TestExplain: each situation, as a Snapshot read it, explained.
func TestExplain(t *testing.T) {
	s1Owner, euOwner := ownerOf(t, "s1"), ownerOf(t, "eu1")
	incOf := map[string]string{"w1": "i1", "w2": "i2", "w3": "i3"}
	for _, tc := range []struct {
		name       string
		id         string
		mod        func(o *Observed)
		wantReason string
		wantWhy    string
		check      func(t *testing.T, e Explanation)
	}{
		{name: "preferred owner", id: "s1", mod: held("s1", s1Owner, incOf[s1Owner], time.Hour), wantReason: ReasonPreferred, wantWhy: s1Owner + " polls it, as planned"},
		{name: "selector: only the matching worker ranks", id: "eu1", mod: held("eu1", euOwner, incOf[euOwner], time.Hour), wantReason: ReasonPreferred,
			check: func(t *testing.T, e Explanation) {
				require.Equal(t, "w3", e.Planned)
				require.Len(t, e.Ranking, 1)
				require.Equal(t, "polls/day", e.PlanUnit)
			}},
		{name: "unplaceable", id: "mars1", wantReason: ReasonNoMatchingWorker, wantWhy: "no live worker matches its selector zone=mars",
			check: func(t *testing.T, e Explanation) { require.True(t, e.NoMatchingWorker); require.Empty(t, e.Ranking) }},
		{name: "quarantined", id: "s1", mod: func(o *Observed) { o.Loss.Marker.QuarantineEnd = o.ServerTime.Add(12 * time.Second) },
			wantReason: ReasonQuarantine, wantWhy: "waiting out the loss quarantine (a new keyspace, or Redis lost data): no free lease is taken until it ends in 12s"},
		{name: "loss marker missing", id: "s1", mod: func(o *Observed) { o.Loss = &Loss{ServerRunID: "r1"} }, wantReason: ReasonLossDetected, wantWhy: "the loss marker is missing"},
		{name: "server restarted", id: "s1", mod: func(o *Observed) { o.Loss.ServerRunID = "r2" }, wantReason: ReasonLossDetected, wantWhy: "run id r1, now r2"},
		{name: "backed off", id: "s1", mod: func(o *Observed) {
			held("s1", s1Owner, incOf[s1Owner], time.Hour)(o)
			o.Backoffs["s1"] = Backoff{Failures: 3, Last: "503", Polled: o.ServerTime.Add(-time.Second), Wait: 4 * time.Second}
		}, wantReason: ReasonPreferred, check: func(t *testing.T, e Explanation) {
			require.NotNil(t, e.NextPoll)
			require.Equal(t, int64(5000), e.NextPoll.DueInMs, "polled 1s ago, interval 2s, backoff 4s")
			require.Contains(t, e.NextPoll.Why, "backing off: 3 polls failed in a row (last 503), so it waits 4s more than its interval")
		}},
		{name: "handoff mark keeps the schedule, at most the bound", id: "s1", mod: func(o *Observed) {
			o.Marks["s1"] = lease.HandoffMark{Released: o.ServerTime, NextPoll: o.ServerTime.Add(time.Minute)}
		}, wantReason: ReasonUnowned, check: func(t *testing.T, e Explanation) {
			require.NotNil(t, e.NextPoll)
			require.Equal(t, int64(2000), e.NextPoll.DueInMs, "bounded by FirstPollBound(2s)")
		}},
		{name: "cordoned holder hands it off", id: "s1", mod: func(o *Observed) {
			held("s1", s1Owner, incOf[s1Owner], time.Hour)(o)
			o.Members.Cordoned = []string{s1Owner}
		}, wantReason: ReasonCordoned, wantWhy: s1Owner + " polls it but is cordoned"},
		{name: "cordoned away: planned on another worker", id: "s1", mod: func(o *Observed) { o.Members.Cordoned = []string{s1Owner} },
			wantReason: ReasonUnowned, check: func(t *testing.T, e Explanation) {
				require.NotEqual(t, s1Owner, e.Planned)
				require.NotEmpty(t, e.Planned)
				for _, r := range e.Ranking {
					require.NotEqual(t, s1Owner, r.ID, "a cordoned worker is not ranked")
				}
			}},
		{name: "previous incarnation", id: "s1", mod: held("s1", s1Owner, "old", time.Hour), wantReason: ReasonPreviousIncarnation,
			wantWhy: "held by a previous incarnation (old) of " + s1Owner},
		{name: "holder not live", id: "s1", mod: held("s1", "ghost", "g", time.Hour), wantReason: ReasonHolderNotLive, wantWhy: "held by ghost, which is not live"},
		{name: "settling after a move", id: "s1", mod: held("s1", notOwner(t, "s1"), incOf[notOwner(t, "s1")], 10*time.Second), wantReason: ReasonSettling,
			wantWhy: "took it 10s ago and keeps it for one lease TTL"},
		{name: "contended", id: "s1", mod: held("s1", notOwner(t, "s1"), incOf[notOwner(t, "s1")], time.Hour), wantReason: ReasonContended},
		{name: "paused", id: "p1", wantReason: ReasonPaused},
		{name: "not found", id: "nope", wantReason: ReasonNotFound},
		{name: "malformed", id: "bad", mod: func(o *Observed) {
			o.Malformed = []session.Problem{{ID: "bad", Err: errors.New("session: malformed: bad json")}}
		}, wantReason: ReasonMalformed, wantWhy: "(session: malformed: bad json)"},
		{name: "bad key", id: "s1", mod: func(o *Observed) {
			o.Leases["s1"] = lease.Holding{Bad: &lease.BadKey{Session: "s1", Role: lease.RoleFence, Key: "k", Problem: "wrong type"}}
			o.Tokens["s1"] = 99
		}, wantReason: ReasonBadKey, check: func(t *testing.T, e Explanation) { require.Zero(t, e.Token, "a bad counter's value is not shown") }},
		{name: "no live worker", id: "s1", mod: func(o *Observed) { o.Members = nodes.Membership{} }, wantReason: ReasonNoWorker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := world(t, tc.mod).Explain(tc.id)
			require.Equal(t, tc.wantReason, e.Reason, e.Why)
			require.Contains(t, e.Why, tc.wantWhy)
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

// TestSnapshotLeavesOutOtherSessionReaders: a live worker whose heartbeat
// says it reads another session namespace is planned nothing, as in the
// workers' own plans, and is listed.
func TestSnapshotLeavesOutOtherSessionReaders(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	o := Observed{
		ServerTime: now,
		Members:    nodes.Membership{Version: 1, Nodes: []string{"w1", "w2"}, ExpiryMs: []int64{1, 1}, ServerTimeMs: now.UnixMilli()},
		Infos:      []nodes.Info{{ID: "w1", Sessions: "session"}, {ID: "w2", Sessions: "sesion"}},
		Sessions:   []session.Session{{ID: "s1", URL: "http://x/", Interval: session.Duration(time.Second)}},
	}
	for _, tt := range []struct {
		ns        string
		wantOwner string
		wantOut   []string
	}{
		{"session", "w1", []string{"w2"}},
		{"sesion", "w2", []string{"w1"}},
	} {
		s, err := Build(o, Options{Sessions: tt.ns})
		require.NoError(t, err)
		require.Equal(t, tt.wantOut, s.OtherSessions)
		for i := range 200 {
			id := fmt.Sprintf("s%d", i)
			require.Equal(t, tt.wantOwner, s.OwnerOf(id), "namespace %s, session %s", tt.ns, id)
		}
	}
}
