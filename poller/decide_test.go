package poller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// The round's decisions, table-tested without Redis or a clock (decide.go).

var t0 = time.Unix(1_000_000, 0)

const (
	decideTTL   = 30 * time.Second
	decideGrace = 20 * time.Second
)

func sess(id string) *session.Session {
	return &session.Session{ID: id, URL: "http://target/" + id, Interval: session.Duration(time.Second)}
}

func withSelector(s *session.Session, sel string) *session.Session {
	s.Selector = sel
	return s
}

// placedOn is a placement given by hand: session -> preferred worker.
func placedOn(m map[string]string) func(string) string {
	return func(id string) string { return m[id] }
}

// baseWorld is w1, live member at membership version 2, reading a (placed
// on w1), b (placed on w2) and c (placed on w1), in a full round.
func baseWorld() *world {
	return &world{
		me: "w1", labels: nodes.Labels{"zone": "a"}, live: true, member: true, members: 2,
		sessions: map[string]*session.Session{"a": sess("a"), "b": sess("b"), "c": sess("c")},
		owner:    placedOn(map[string]string{"a": "w1", "b": "w2", "c": "w1"}),
		full:     true, touched: map[string]struct{}{}, released: map[string]struct{}{},
		leaseTTL: decideTTL, orphanGrace: decideGrace,
	}
}

// heldSince is a loop of s started at membership version members, its
// lease acquired at `at`.
func heldSince(s *session.Session, members uint64, at time.Time) *hold {
	return &hold{sess: s, members: members, acquired: at}
}

func TestDecide(t *testing.T) {
	long := t0.Add(-time.Hour) // held for longer than a lease TTL
	tests := []struct {
		name   string
		world  func(w *world)
		claims func(cl *claims)
		held   map[string]*hold
		now    time.Time
		want   actions
	}{
		// The hold rule.
		{name: "hold: a session placed here is kept, the rest placed here acquired",
			held: map[string]*hold{"a": heldSince(sess("a"), 2, long)},
			want: actions{acquire: []string{"c"}}},
		{name: "hold: a removed session stops",
			held: map[string]*hold{"x": heldSince(sess("x"), 2, long)},
			want: actions{stop: []string{"x"}, abort: []string{"x"}, acquire: []string{"a", "c"}}},
		{name: "hold: a paused session (not among the active ones) stops, even placed here and just taken",
			world: func(w *world) { delete(w.sessions, "a") },
			held:  map[string]*hold{"a": heldSince(sess("a"), 2, t0)},
			want:  actions{stop: []string{"a"}, abort: []string{"a"}, acquire: []string{"c"}}},
		{name: "hold: preferred elsewhere after a membership change moves at once",
			held: map[string]*hold{"b": heldSince(sess("b"), 1, t0)},
			want: actions{stop: []string{"b"}, acquire: []string{"a", "c"}}},
		{name: "hold: preferred elsewhere for a change of sizes alone is held back a lease TTL",
			held: map[string]*hold{"b": heldSince(sess("b"), 2, t0.Add(-time.Second))},
			want: actions{acquire: []string{"a", "c"}, settleAt: t0.Add(-time.Second + decideTTL)}},
		{name: "hold: the earliest settle time is kept",
			world: func(w *world) {
				w.sessions["d"] = sess("d")
				w.owner = placedOn(map[string]string{"a": "w1", "b": "w2", "c": "w1", "d": "w2"})
			},
			held: map[string]*hold{"b": heldSince(sess("b"), 2, t0.Add(-time.Second)), "d": heldSince(sess("d"), 2, t0.Add(-5*time.Second))},
			want: actions{acquire: []string{"a", "c"}, settleAt: t0.Add(-5*time.Second + decideTTL)}},
		{name: "hold: preferred elsewhere and held a lease TTL moves",
			held: map[string]*hold{"b": heldSince(sess("b"), 2, t0.Add(-decideTTL))},
			want: actions{stop: []string{"b"}, acquire: []string{"a", "c"}}},
		{name: "hold: with no placeable worker at all the session is kept",
			world: func(w *world) { w.owner = placedOn(nil) },
			held:  map[string]*hold{"b": heldSince(sess("b"), 1, long)},
			want:  actions{}},
		{name: "hold: while Redis is full nothing is handed off",
			world: func(w *world) { w.redisFull = true },
			held:  map[string]*hold{"b": heldSince(sess("b"), 1, long)},
			want:  actions{acquire: []string{"a", "c"}}},
		{name: "hold: a redefined session restarts under the same lease",
			world: func(w *world) { w.sessions["a"].URL = "http://target/new" },
			held:  map[string]*hold{"a": heldSince(sess("a"), 2, long)},
			want:  actions{restart: []string{"a"}, acquire: []string{"c"}}},
		{name: "hold: a loop already stopping is left to end",
			held: map[string]*hold{"x": {sess: sess("x"), members: 2, acquired: long, stopping: true}},
			want: actions{acquire: []string{"a", "c"}}},
		{name: "hold: a round that is not full looks only at the touched sessions",
			world: func(w *world) { w.full = false; w.touched = map[string]struct{}{"c": {}} },
			held:  map[string]*hold{"b": heldSince(sess("b"), 1, long), "x": heldSince(sess("x"), 2, long)},
			want:  actions{acquire: []string{"c"}}},

		// Orphans.
		{name: "orphans: one adopted less than OrphanGrace ago stays",
			world:  func(w *world) { w.full = false },
			claims: func(cl *claims) { cl.orphanSince["b"] = t0.Add(-decideGrace + time.Second) },
			held:   map[string]*hold{"b": heldSince(sess("b"), 1, long)},
			want:   actions{}},
		{name: "orphans: one adopted OrphanGrace ago goes back to its preferred worker, untouched",
			world:  func(w *world) { w.full = false },
			claims: func(cl *claims) { cl.orphanSince["b"] = t0.Add(-decideGrace) },
			held:   map[string]*hold{"b": heldSince(sess("b"), 1, long)},
			want:   actions{stop: []string{"b"}}},

		// Acquiring.
		{name: "acquire: not live, nothing is taken (held ones still stop)",
			world: func(w *world) { w.live = false },
			held:  map[string]*hold{"x": heldSince(sess("x"), 2, long)},
			want:  actions{stop: []string{"x"}, abort: []string{"x"}}},
		{name: "acquire: not a member (its peers do not count it), nothing is taken",
			world: func(w *world) { w.member = false },
			want:  actions{}},
		{name: "acquire: a round that is not full takes only the touched sessions",
			world: func(w *world) { w.full = false; w.touched = map[string]struct{}{"a": {}, "b": {}, "gone": {}} },
			want:  actions{acquire: []string{"a"}}},
		{name: "acquire: the share missing is counted for readiness",
			world: func(w *world) { w.share = true },
			held:  map[string]*hold{"a": heldSince(sess("a"), 2, long)},
			want:  actions{acquire: []string{"c"}, missing: 1}},

		// Contention.
		{name: "contention: a session another worker holds is not asked for again",
			claims: func(cl *claims) { cl.contended["a"] = contention{holder: "w3", until: t0.Add(5 * time.Second)} },
			want:   actions{acquire: []string{"c"}, retryAt: t0.Add(5 * time.Second)}},
		{name: "contention: its holder announced a release: asked for again",
			world: func(w *world) {
				w.full, w.released = false, map[string]struct{}{"w3": {}}
			},
			claims: func(cl *claims) { cl.contended["a"] = contention{holder: "w3", until: t0.Add(5 * time.Second)} },
			want:   actions{uncontend: []string{"a"}, acquire: []string{"a"}}},
		{name: "contention: another peer's release changes nothing; the first expiry sets the retry",
			world: func(w *world) { w.released = map[string]struct{}{"w4": {}} },
			claims: func(cl *claims) {
				cl.contended["a"] = contention{holder: "w3", until: t0.Add(5 * time.Second)}
				cl.contended["c"] = contention{holder: "w3", until: t0.Add(2 * time.Second)}
			},
			want: actions{retryAt: t0.Add(2 * time.Second)}},
		{name: "contention: the holder's lease ran out: asked for again",
			world: func(w *world) { w.full = false },
			claims: func(cl *claims) {
				cl.contended["a"] = contention{holder: "w3", until: t0}
				cl.contended["c"] = contention{holder: "w3", until: t0.Add(time.Second)}
			},
			want: actions{uncontend: []string{"a"}, acquire: []string{"a"}, retryAt: t0.Add(time.Second)}},

		// The loss quarantine (a free lease nobody may take yet: no holder).
		{name: "quarantine: a release announced by anyone does not end it",
			world:  func(w *world) { w.released = map[string]struct{}{"w2": {}, "": {}} },
			claims: func(cl *claims) { cl.contended["a"] = contention{until: t0.Add(10 * time.Second)} },
			want:   actions{acquire: []string{"c"}, retryAt: t0.Add(10 * time.Second)}},
		{name: "quarantine: once it ended the session is asked for again",
			world:  func(w *world) { w.full = false },
			claims: func(cl *claims) { cl.contended["a"] = contention{until: t0.Add(-time.Millisecond)} },
			want:   actions{uncontend: []string{"a"}, acquire: []string{"a"}}},

		// Cordons.
		{name: "cordon: a cordoned worker takes nothing, even what a stale plan gives it",
			world: func(w *world) { w.cordoned = true },
			want:  actions{}},
		{name: "cordon: a cordoned worker hands off what the plan of the placeable workers gives a peer",
			world: func(w *world) {
				w.cordoned, w.members = true, 3
				w.owner = placedOn(map[string]string{"a": "w2", "b": "w2", "c": "w2"})
			},
			held: map[string]*hold{"a": heldSince(sess("a"), 2, t0), "c": heldSince(sess("c"), 2, long)},
			want: actions{stop: []string{"a", "c"}}},

		// Selectors.
		{name: "selectors: a session whose selector this worker matches is taken",
			world: func(w *world) { w.sessions["a"] = withSelector(sess("a"), "zone=a") },
			want:  actions{acquire: []string{"a", "c"}}},
		{name: "selectors: one it does not match is not, whatever the plan says",
			world: func(w *world) { w.sessions["a"] = withSelector(sess("a"), "zone=b") },
			want:  actions{acquire: []string{"c"}}},
		{name: "selectors: a held session whose selector changed to one it does not match stops",
			world: func(w *world) { w.sessions["a"] = withSelector(sess("a"), "zone=b") },
			held:  map[string]*hold{"a": heldSince(sess("a"), 2, t0)},
			want:  actions{stop: []string{"a"}, acquire: []string{"c"}}},

		// Unplaceable sessions (a selector no placeable worker matches: no plan, no owner).
		{name: "unplaceable: nobody is preferred, so it is taken by nobody",
			world: func(w *world) {
				w.sessions["u"] = withSelector(sess("u"), "gpu=yes")
				w.share = true
			},
			want: actions{acquire: []string{"a", "c"}, missing: 2}},
		{name: "unplaceable: one held here (matched, but no placeable worker now) is kept",
			world: func(w *world) {
				w.sessions["u"] = withSelector(sess("u"), "zone=a")
				w.members = 3
			},
			held: map[string]*hold{"u": heldSince(withSelector(sess("u"), "zone=a"), 2, long)},
			want: actions{acquire: []string{"a", "c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := baseWorld()
			if tt.world != nil {
				tt.world(w)
			}
			cl := newClaims(nil, nil, 0)
			if tt.claims != nil {
				tt.claims(cl)
			}
			held := tt.held
			if held == nil {
				held = map[string]*hold{}
			}
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			require.Equal(t, tt.want, decide(w, cl, held, now))
		})
	}
}

// TestDecideShedding: a worker that sheds load (its heartbeat carries a
// lower weight) gets less from the plan every worker computes, and hands
// the difference to its peers by the hold rule: held back within a lease
// TTL of its acquisition (a weight change is no membership change), moved
// after it. The placement is the real one (assign), with the weights the
// shedding step (shedding.step) advertises.
func TestDecideShedding(t *testing.T) {
	var sh shedding
	now := t0
	fraction, _ := sh.step(now, true, true, decideTTL)
	require.Equal(t, 1.0, fraction, "not shed before a whole lease TTL behind")
	fraction, changed := sh.step(now.Add(decideTTL), true, true, decideTTL)
	require.True(t, changed)
	require.Equal(t, shedStep, fraction)

	plan := func(w1 float64) *assign.Plan {
		f, err := assign.NewFleet(assign.Member{ID: "w1", Weight: w1}, assign.Member{ID: "w2", Weight: 1})
		require.NoError(t, err)
		return f.Plan(nil, -1)
	}
	before, after := plan(1), plan(shedFloor)
	moved := ""
	for i := 0; i < 1000 && moved == ""; i++ {
		id := fmt.Sprint("s", i)
		if before.OwnerOf(id) == "w1" && after.OwnerOf(id) == "w2" {
			moved = id
		}
	}
	require.NotEmpty(t, moved, "a lower weight moves some session to the peer")

	tests := []struct {
		name string
		held time.Time
		want actions
	}{
		{"held less than a lease TTL: held back", t0.Add(-time.Second), actions{settleAt: t0.Add(-time.Second + decideTTL)}},
		{"held a lease TTL: handed to the peer", t0.Add(-decideTTL), actions{stop: []string{moved}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := baseWorld()
			w.labels = nil
			w.sessions = map[string]*session.Session{moved: sess(moved)}
			w.owner = after.OwnerOf
			got := decide(w, newClaims(nil, nil, 0), map[string]*hold{moved: heldSince(sess(moved), 2, tt.held)}, t0)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestDecideShedStep: the weight a worker advertises while it stays
// behind, and takes back once it keeps up.
func TestDecideShedStep(t *testing.T) {
	span := decideTTL
	tests := []struct {
		name    string
		start   shedding
		at      time.Duration // after the start's changedAt
		behind  bool
		noRoom  bool // every peer is behind too (peersWithRoom false)
		want    float64
		changed bool
	}{
		{"keeping up: nothing shed", shedding{fraction: 1}, span, false, false, 1, false},
		{"behind less than a span: nothing yet", shedding{fraction: 1, behind: true}, span - time.Second, true, false, 1, false},
		{"behind a whole span: one step down", shedding{fraction: 1, behind: true}, span, true, false, shedStep, true},
		{"behind, every peer behind too: nothing shed", shedding{fraction: 1, behind: true}, 10 * span, true, true, 1, false},
		{"behind, shed, then every peer behind: kept", shedding{fraction: 0.5, behind: true}, 10 * span, true, true, 0.5, false},
		{"never below the floor", shedding{fraction: shedFloor, behind: true}, 10 * span, true, false, shedFloor, false},
		{"just caught up: the stretch restarts", shedding{fraction: 0.5, behind: true}, 100 * span, false, false, 0.5, false},
		{"kept up recoverSpans spans: a step back up", shedding{fraction: 0.5}, recoverSpans * span, false, false, 0.5 + recoverStep, true},
		{"never above the weight", shedding{fraction: 0.95}, recoverSpans * span, false, false, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := tt.start
			sh.changedAt = t0
			got, changed := sh.step(t0.Add(tt.at), tt.behind, !tt.noRoom, span)
			require.InDelta(t, tt.want, got, 1e-9)
			require.Equal(t, tt.changed, changed)
		})
	}
}

func TestDecideAcquired(t *testing.T) {
	l := &lease.Lease{}
	tests := []struct {
		name                    string
		r                       lease.Result
		held, active, leaseHeld bool
		want                    acquiredVerdict
	}{
		{"won: the loop starts", lease.Result{Session: "a", Lease: l}, false, true, true, acquiredStart},
		{"won, but paused or removed meanwhile: released at once", lease.Result{Session: "a", Lease: l}, false, false, true, acquiredRelease},
		{"won again while its loop runs: nothing", lease.Result{Session: "a", Lease: l}, true, true, true, acquiredNothing},
		{"won, but the lease is no longer Held: nothing", lease.Result{Session: "a", Lease: l}, false, true, false, acquiredNothing},
		{"another worker holds it: contended", lease.Result{Session: "a", Holder: "w2", Remaining: time.Second}, false, true, false, acquiredContended},
		{"loss quarantine: contended until it ends", lease.Result{Session: "a", Quarantined: true, Remaining: time.Second}, false, true, false, acquiredContended},
		{"a holder's key without expiry: asked again next round", lease.Result{Session: "a", Holder: "w2", Remaining: -1}, false, true, false, acquiredNothing},
		{"a bad key: skipped", lease.Result{Session: "a", Bad: &lease.BadKey{}}, false, true, false, acquiredNothing},
		{"the outcome is unknown: looked at again", lease.Result{Session: "a", Err: errors.New("timeout")}, false, true, false, acquiredUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, decideAcquired(tt.r, tt.held, tt.active, tt.leaseHeld))
		})
	}
}

func TestDecideOrphans(t *testing.T) {
	tests := []struct {
		name     string
		pending  map[string]time.Time
		free     []string
		wantTake []string
		wantNext map[string]time.Time
	}{
		{"first seen free: watched from now", nil, []string{"a"}, nil, map[string]time.Time{"a": t0}},
		{"free for less than OrphanGrace: still watched", map[string]time.Time{"a": t0.Add(-time.Second)}, []string{"a"}, nil,
			map[string]time.Time{"a": t0.Add(-time.Second)}},
		{"free for OrphanGrace: adopted", map[string]time.Time{"a": t0.Add(-decideGrace)}, []string{"a"}, []string{"a"}, map[string]time.Time{}},
		{"taken by someone meanwhile: forgotten", map[string]time.Time{"a": t0.Add(-decideGrace)}, nil, nil, map[string]time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			take, next := decideOrphans(tt.pending, tt.free, t0, decideGrace)
			require.Equal(t, tt.wantTake, take)
			require.Equal(t, tt.wantNext, next)
		})
	}
}

func TestDecideExited(t *testing.T) {
	tests := []struct {
		name   string
		h      hold
		state  lease.State
		active bool
		want   exitVerdict
	}{
		{"its lease was lost: forgotten", hold{}, lease.Lost, true, exitForget},
		{"released under it: forgotten", hold{}, lease.Released, true, exitForget},
		{"handed off: released with its schedule", hold{stopping: true}, lease.Held, true, exitHandOff},
		{"handed off while in doubt: released with its schedule", hold{stopping: true}, lease.Uncertain, true, exitHandOff},
		{"paused or removed: released with no schedule", hold{stopping: true}, lease.Held, false, exitRelease},
		{"redefined: restarted under the same lease", hold{restartAs: sess("a")}, lease.Held, true, exitRestart},
		{"redefined while in doubt: released", hold{restartAs: sess("a")}, lease.Uncertain, true, exitHandOff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, decideExited(&tt.h, tt.state, tt.active))
		})
	}
}

// TestRestartDue: a redefined session keeps its schedule unless what it
// sends changed or it runs on a schedule of slots.
func TestRestartDue(t *testing.T) {
	now := time.Unix(1000, 0)
	base := session.Session{ID: "s", URL: "http://t/a", Interval: session.Duration(10 * time.Second), Labels: map[string]string{"a": "1"}}
	with := func(f func(*session.Session)) *session.Session { s := base; f(&s); return &s }
	began := now.Add(-7 * time.Second)
	next := began.Add(11 * time.Second) // 10 s and a spread step of 1 s
	for _, tt := range []struct {
		name        string
		s           *session.Session
		next, began time.Time
		want        time.Time
	}{
		{"labels changed: its schedule", with(func(s *session.Session) { s.Labels = map[string]string{"a": "2"} }), next, began, next},
		{"selector changed: its schedule", with(func(s *session.Session) { s.Selector = "zone=b" }), next, began, next},
		{"interval longer: one new interval after the last poll", with(func(s *session.Session) { s.Interval = session.Duration(time.Minute) }), next, began, began.Add(time.Minute)},
		{"interval shorter, past: now", with(func(s *session.Session) { s.Interval = session.Duration(time.Second) }), next, began, now},
		{"interval shorter, ahead: not the old spread step", with(func(s *session.Session) { s.Interval = session.Duration(8 * time.Second) }), next, began, began.Add(8 * time.Second)},
		{"interval changed, never polled: now", with(func(s *session.Session) { s.Interval = session.Duration(8 * time.Second) }), next, time.Time{}, now},
		{"URL changed: at once", with(func(s *session.Session) { s.URL = "http://t/b" }), next, began, now},
		{"request changed: at once", with(func(s *session.Session) { s.Method = "POST" }), next, began, now},
		{"scheduled: its slots decide", with(func(s *session.Session) { s.Interval = 0; s.Schedule = "* * * * *" }), next, began, now},
		{"no schedule known: now", with(func(s *session.Session) { s.Labels = nil }), time.Time{}, began, now},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, restartDue(&base, tt.s, tt.next, tt.began, now))
		})
	}
}
