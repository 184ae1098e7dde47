package fleet

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// sizesOf counts ids per bucket.
func sizesOf(ids ...string) []int {
	sizes := make([]int, assign.Buckets)
	for _, id := range ids {
		sizes[keyspace.BucketOf(id)]++
	}
	return sizes
}

func TestPlaceSelectors(t *testing.T) {
	eu := nodes.Info{ID: "w-eu", Labels: nodes.Labels{"zone": "eu"}}
	eu2 := nodes.Info{ID: "w-eu2", Labels: nodes.Labels{"zone": "eu", "egress": "static"}, Weight: 2}
	us := nodes.Info{ID: "w-us", Labels: nodes.Labels{"zone": "us"}}
	space := func(ids ...string) *session.Space {
		return &session.Space{Sizes: sizesOf(ids...), Loads: sizesOf(ids...)}
	}
	for _, tc := range []struct {
		name        string
		ids         []string
		infos       []nodes.Info
		spaces      map[string]*session.Space
		planned     func(Selector) bool
		session     string
		selector    string
		owners      []string // the possible owners
		unplaceable int
		placeable   bool
	}{
		{name: "no selector: any member", ids: []string{"w-eu", "w-us"}, infos: []nodes.Info{eu, us}, session: "a", owners: []string{"w-eu", "w-us"}, placeable: true},
		{name: "selector: only the matching member", ids: []string{"w-eu", "w-us"}, infos: []nodes.Info{eu, us},
			spaces: map[string]*session.Space{"zone=eu": space("a")}, session: "a", selector: "zone=eu", owners: []string{"w-eu"}, placeable: true},
		{name: "selector with two pairs: only the member with both", ids: []string{"w-eu", "w-eu2"}, infos: []nodes.Info{eu, eu2},
			spaces: map[string]*session.Space{"egress=static,zone=eu": space("a")}, session: "a", selector: "zone=eu,egress=static", owners: []string{"w-eu2"}, placeable: true},
		{name: "selector nobody matches: unplaceable, counted", ids: []string{"w-eu", "w-us"}, infos: []nodes.Info{eu, us},
			spaces: map[string]*session.Space{"zone=mars": space("a", "b")}, session: "a", selector: "zone=mars", owners: []string{""}, unplaceable: 2},
		{name: "member without a heartbeat info matches no selector", ids: []string{"w-eu"}, infos: nil,
			spaces: map[string]*session.Space{"zone=eu": space("a")}, session: "a", selector: "zone=eu", owners: []string{""}, unplaceable: 1},
		{name: "cordoned member left out by the caller: its labels do not count", ids: []string{"w-us"}, infos: []nodes.Info{eu, us},
			spaces: map[string]*session.Space{"zone=eu": space("a")}, session: "a", selector: "zone=eu", owners: []string{""}, unplaceable: 1},
		{name: "a selector not planned still ranks by PlanOf", ids: []string{"w-eu", "w-us"}, infos: []nodes.Info{eu, us},
			spaces: map[string]*session.Space{"zone=eu": space("a")}, planned: func(Selector) bool { return false },
			session: "a", selector: "zone=eu", owners: []string{"w-eu"}, placeable: true},
		{name: "a bad space name selects nobody", ids: []string{"w-eu"}, infos: []nodes.Info{eu},
			spaces: map[string]*session.Space{"zone=": space("a")}, session: "a", owners: []string{"w-eu"}, unplaceable: 1, placeable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := WeighMembers(tc.ids, tc.infos)
			pl, err := NewPlanner(0.05).Place(ms, sizesOf(tc.session), tc.spaces, tc.planned)
			require.NoError(t, err)
			sel, err := ParseSelector(tc.selector)
			require.NoError(t, err)
			require.Contains(t, tc.owners, pl.OwnerOf(tc.session, sel))
			require.Equal(t, tc.unplaceable, pl.Unplaceable())
			require.Equal(t, tc.placeable, pl.Placeable(sel))
		})
	}
}

// TestPlaceMatchesAssign: the default space is assign's plan of the
// weighed members, so that every caller plans as the workers do.
func TestPlaceMatchesAssign(t *testing.T) {
	var ids []string
	for i := range 200 {
		ids = append(ids, string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	infos := []nodes.Info{{ID: "w1", Weight: 2}, {ID: "w2"}, {ID: "w3", Weight: 0.5}}
	pl, err := NewPlanner(0.05).Place(WeighMembers([]string{"w1", "w2", "w3"}, infos), sizesOf(ids...), nil, nil)
	require.NoError(t, err)
	f, err := assign.NewFleet(assign.Member{ID: "w1", Weight: 2}, assign.Member{ID: "w2", Weight: 1}, assign.Member{ID: "w3", Weight: 0.5})
	require.NoError(t, err)
	want := f.Plan(sizesOf(ids...), 0.05)
	for _, id := range ids {
		require.Equal(t, want.OwnerOf(id), pl.OwnerOf(id, Selector{}), id)
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		require.Equal(t, want.Load(w), pl.Load(w), w)
	}
}

// TestPlaceKeepsFleets: a Planner reuses a space's fleet while the
// members are the same, and builds a new one when a weight or label
// changes.
func TestPlaceKeepsFleets(t *testing.T) {
	p := NewPlanner(0.05)
	ms := WeighMembers([]string{"w1", "w2"}, []nodes.Info{{ID: "w1"}, {ID: "w2"}})
	f1, err := p.Fleet(ms, Selector{})
	require.NoError(t, err)
	f2, err := p.Fleet(WeighMembers([]string{"w1", "w2"}, []nodes.Info{{ID: "w1"}, {ID: "w2"}}), Selector{})
	require.NoError(t, err)
	require.Same(t, f1, f2)
	f3, err := p.Fleet(WeighMembers([]string{"w1", "w2"}, []nodes.Info{{ID: "w1", Weight: 2}, {ID: "w2"}}), Selector{})
	require.NoError(t, err)
	require.NotSame(t, f1, f3)
	f4, err := p.Fleet(WeighMembers([]string{"w1", "w2"}, []nodes.Info{{ID: "w1", Weight: 2, Labels: nodes.Labels{"a": "b"}}, {ID: "w2"}}), Selector{})
	require.NoError(t, err)
	require.NotSame(t, f3, f4)
}

// TestPlaceBuckets: a worker reads the buckets it owns in any plan and
// watches the others it is runner-up for.
func TestPlaceBuckets(t *testing.T) {
	pl, err := NewPlanner(0.05).Place(Equal("w1", "w2"), nil, nil, nil)
	require.NoError(t, err)
	b1, b2 := pl.Buckets("w1"), pl.Buckets("w2")
	require.Len(t, b1, assign.Buckets, "with two workers each bucket is owned by one and watched by the other")
	for b, owned := range b1 {
		require.Equal(t, !owned, b2[b], "bucket %d", b)
		require.Equal(t, owned, pl.Default.Owner(b) == "w1")
	}
	require.Empty(t, pl.Buckets("w3"))
}

func TestPlaceParseSelector(t *testing.T) {
	for _, tc := range []struct {
		give, want string
		labels     nodes.Labels
		matches    bool
		err        bool
	}{
		{give: "", want: "", matches: true},
		{give: "zone=eu", want: "zone=eu", labels: nodes.Labels{"zone": "eu", "x": "y"}, matches: true},
		{give: " zone=eu , a=b", want: "a=b,zone=eu", labels: nodes.Labels{"zone": "eu"}},
		{give: "zone", err: true},
	} {
		sel, err := ParseSelector(tc.give)
		if tc.err {
			require.Error(t, err, tc.give)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, sel.String())
		require.Equal(t, tc.matches, sel.Matches(tc.labels), tc.give)
		require.Equal(t, sel, SelectorOf(session.Session{Selector: tc.give}))
	}
	bad := SelectorOf(session.Session{Selector: "bad"})
	require.False(t, bad.IsNone())
	require.False(t, bad.Matches(nodes.Labels{"bad": ""}), "an invalid selector matches no worker")
}

func TestReadingSessions(t *testing.T) {
	infos := []nodes.Info{{ID: "a", Sessions: "session"}, {ID: "b"}, {ID: "c", Sessions: "sesion"}, {ID: "d", Sessions: "session"}}
	for _, tt := range []struct {
		name              string
		ids               []string
		ns                string
		wantSame, wantOut []string
	}{
		{"one reads another namespace", []string{"a", "b", "c", "d"}, "session", []string{"a", "b", "d"}, []string{"c"}},
		{"seen from the other side", []string{"a", "b", "c", "d"}, "sesion", []string{"b", "c"}, []string{"a", "d"}},
		{"a member without an info takes part", []string{"a", "e"}, "session", []string{"a", "e"}, nil},
		{"none", nil, "session", nil, nil},
		{"every member reads it: the ids as given", []string{"b", "e"}, "session", []string{"b", "e"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			same, out := ReadingSessions(tt.ids, infos, tt.ns)
			require.Equal(t, tt.wantSame, same)
			require.Equal(t, tt.wantOut, out)
		})
	}
}

func TestAgreedSlack(t *testing.T) {
	info := func(id string, slack float64) nodes.Info { return nodes.Info{ID: id, BalanceSlack: slack} }
	for _, tc := range []struct {
		name      string
		infos     []nodes.Info
		slack     float64
		ok, mixed bool
	}{
		{name: "nobody says", infos: []nodes.Info{info("a", 0), info("b", 0)}},
		{name: "no members"},
		{name: "one value", infos: []nodes.Info{info("a", 0.05), info("b", 0.05)}, slack: 0.05, ok: true},
		{name: "a worker that predates it says nothing", infos: []nodes.Info{info("a", 0.2), info("old", 0)}, slack: 0.2, ok: true},
		{name: "the tightest bound wins", infos: []nodes.Info{info("a", 0.2), info("b", 0.05), info("c", 0.1)}, slack: 0.05, ok: true, mixed: true},
		{name: "a bound wins over off", infos: []nodes.Info{info("a", -1), info("b", 0.3)}, slack: 0.3, ok: true, mixed: true},
		{name: "a bound wins over off, in either order", infos: []nodes.Info{info("b", 0.3), info("a", -1)}, slack: 0.3, ok: true, mixed: true},
		{name: "every off is the same", infos: []nodes.Info{info("a", -1), info("b", -0.5)}, slack: -1, ok: true},
		{name: "NaN says nothing", infos: []nodes.Info{info("a", math.NaN()), info("b", 0.1)}, slack: 0.1, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slack, ok, mixed := AgreedSlack(tc.infos)
			require.Equal(t, tc.slack, slack)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.mixed, mixed)
		})
	}
}

// TestPlannersOfDifferentSlacksAgree: two workers configured with
// different balance slacks plan the same placement from the same
// heartbeats, so no bucket is one's in the other's eyes and nobody's in
// its own; with no slack published each plans with its own.
func TestPlannersOfDifferentSlacksAgree(t *testing.T) {
	ids := []string{"w1", "w2", "w3"}
	weights := make([]int, assign.Buckets)
	for b := 0; b < 30; b++ {
		weights[b*7] = 1 // few units: plain rendezvous hashing is far from even
	}
	plan := func(own float64, infos []nodes.Info) *assign.Plan {
		pl, err := NewPlanner(own).Place(WeighMembers(ids, infos), weights, nil, nil)
		require.NoError(t, err)
		return pl.Default
	}
	owners := func(p *assign.Plan) []string {
		out := make([]string, assign.Buckets)
		for b := range out {
			out[b] = p.Owner(b)
		}
		return out
	}
	published := []nodes.Info{{ID: "w1", BalanceSlack: -1}, {ID: "w2", BalanceSlack: 0.05}, {ID: "w3", BalanceSlack: -1}}
	require.True(t, slices.Equal(owners(plan(-1, published)), owners(plan(0.05, published))), "workers of different slacks planned differently")
	require.True(t, slices.Equal(owners(plan(0.05, nil)), owners(plan(-1, published))), "the fleet does not plan with the tightest slack published")
	silent := []nodes.Info{{ID: "w1"}, {ID: "w2"}, {ID: "w3"}}
	require.False(t, slices.Equal(owners(plan(-1, silent)), owners(plan(0.05, silent))), "the weights do not tell the slacks apart: the test proves nothing")
	ms := WeighMembers(ids, published)
	slack, mixed := ms.Slack(-1)
	require.Equal(t, 0.05, slack)
	require.True(t, mixed)
	require.NotEqual(t, ms.Key(), WeighMembers(ids, silent).Key(), "a published slack must change the members' key (a new plan)")
}
