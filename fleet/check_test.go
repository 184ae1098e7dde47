package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// healthy holds every placeable active session of the world by its
// planned owner's current incarnation.
func healthy(t *testing.T) func(o *Observed) {
	s1, eu := ownerOf(t, "s1"), ownerOf(t, "eu1")
	inc := map[string]string{"w1": "i1", "w2": "i2", "w3": "i3"}
	return func(o *Observed) {
		held("s1", s1, inc[s1], time.Hour)(o)
		held("eu1", eu, inc[eu], time.Hour)(o)
	}
}

// then applies mods in order.
func then(mods ...func(o *Observed)) func(o *Observed) {
	return func(o *Observed) {
		for _, m := range mods {
			if m != nil {
				m(o)
			}
		}
	}
}

// later moves the server clock on, and the leases' TTLs down, by d.
func later(d time.Duration, renewed ...string) func(o *Observed) {
	return func(o *Observed) {
		o.ServerTime = o.ServerTime.Add(d)
		for id, h := range o.Leases {
			if !strings.Contains(strings.Join(renewed, ","), id) {
				h.Remaining -= d
			}
			o.Leases[id] = h
		}
	}
}

// TestCheck: the invariants check reports, from two reads.
func TestCheck(t *testing.T) {
	ok := healthy(t)
	s1 := ownerOf(t, "s1")
	other := notOwner(t, "s1")
	inc := map[string]string{"w1": "i1", "w2": "i2", "w3": "i3"}
	unowned := func(id string) func(o *Observed) { return func(o *Observed) { delete(o.Leases, id) } }
	for _, tc := range []struct {
		name          string
		first, last   func(o *Observed) // last nil: the same read twice
		maxNotPlanned int
		want          map[string]int // check -> lines
		wantNote      string
		wantLeases    int
	}{
		{name: "healthy but for the unplaceable", first: ok, want: map[string]int{CheckUnplaceable: 1, CheckHolderNotLive: 0, CheckPrevious: 0, CheckNoLease: 0, CheckNotPlanned: 0, CheckBadKey: 0}, wantLeases: 2},
		{name: "holder not live", first: then(ok, held("s1", "ghost", "g", time.Hour)), want: map[string]int{CheckHolderNotLive: 1}, wantLeases: 2},
		{name: "holder not live renews", first: then(ok, held("s1", "ghost", "g", time.Hour)), last: then(ok, held("s1", "ghost", "g", time.Hour), later(5*time.Second, "s1")),
			want: map[string]int{CheckHolderNotLive: 1}, wantLeases: 2},
		{name: "previous incarnation", first: then(ok, held("s1", s1, "old", time.Hour)), want: map[string]int{CheckPrevious: 1}, wantLeases: 2},
		{name: "two processes with one id", first: then(ok, held("s1", s1, "old", time.Hour)), last: then(ok, held("s1", s1, "old", time.Hour), later(5*time.Second, "s1")),
			want: map[string]int{CheckDuplicateID: 1}, wantLeases: 2},
		{name: "previous incarnation, not renewed", first: then(ok, held("s1", s1, "old", time.Hour)), last: then(ok, held("s1", s1, "old", time.Hour), later(5*time.Second)),
			want: map[string]int{CheckPrevious: 1}, wantLeases: 2},
		{name: "no lease at both reads", first: then(ok, unowned("s1")), last: then(ok, unowned("s1"), later(time.Second)), want: map[string]int{CheckNoLease: 1}, wantLeases: 1},
		{name: "no lease at the last read only", first: ok, last: then(ok, unowned("s1"), later(time.Second)), want: map[string]int{CheckNoLease: 0}, wantLeases: 1},
		{name: "no lease, waiting out the quarantine", first: then(ok, unowned("s1"), func(o *Observed) { o.Loss.Marker.QuarantineEnd = o.ServerTime.Add(time.Minute) }),
			want: map[string]int{CheckNoLease: 0}, wantNote: "1 active sessions wait out the loss quarantine", wantLeases: 1},
		{name: "no live worker: one line", first: then(unowned("s1"), func(o *Observed) { o.Members = nodes.Membership{} }),
			want: map[string]int{CheckNoLease: 1, CheckUnplaceable: 2}},
		{name: "off the plan, no bound: a note", first: then(ok, held("s1", other, inc[other], time.Hour)), maxNotPlanned: -1,
			want: map[string]int{CheckNotPlanned: 0}, wantNote: "1 leases held by a live worker the plan does not place them on (e.g. s1)", wantLeases: 2},
		{name: "off the plan, over the bound", first: then(ok, held("s1", other, inc[other], time.Hour)), maxNotPlanned: 0,
			want: map[string]int{CheckNotPlanned: 1}, wantLeases: 2},
		{name: "off the plan at the last read only", first: ok, last: then(ok, held("s1", other, inc[other], time.Hour), later(time.Second)), maxNotPlanned: 0,
			want: map[string]int{CheckNotPlanned: 0}, wantLeases: 2},
		{name: "unplaceable at both reads", first: ok, last: then(ok, later(time.Second)), want: map[string]int{CheckUnplaceable: 1}, wantLeases: 2},
		{name: "unplaceable at the last read only", first: then(ok, func(o *Observed) {
			o.Infos = append(o.Infos, nodes.Info{ID: "w4", Labels: nodes.Labels{"zone": "mars"}})
			o.Members = nodes.Membership{Version: 2, Nodes: []string{"w1", "w2", "w3", "w4"}, ExpiryMs: []int64{1, 1, 1, 1}}
		}), last: ok, want: map[string]int{CheckUnplaceable: 0}, wantLeases: 2},
		{name: "bad key", first: then(ok, func(o *Observed) {
			o.Leases["s1"] = lease.Holding{Bad: &lease.BadKey{Session: "s1", Role: lease.RoleLease, Key: "k", Problem: "wrong type"}}
		}), want: map[string]int{CheckBadKey: 1, CheckNoLease: 0}, wantLeases: 1},
		{name: "many problems: ten lines and one for the rest", first: func(o *Observed) {
			for i := range 15 {
				id := fmt.Sprintf("x%02d", i)
				o.Sessions = append(o.Sessions, session.Session{ID: id, URL: "http://x/", Interval: session.Duration(time.Second)})
				held(id, "ghost", "g", time.Hour)(o)
			}
		}, want: map[string]int{CheckHolderNotLive: MaxProblemLines + 1}, wantLeases: 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := world(t, tc.first)
			last := first
			if tc.last != nil {
				last = world(t, tc.last)
			}
			c := Check(first, last, tc.maxNotPlanned)
			lines := map[string]int{}
			for _, p := range c.Problems {
				lines[p.Check]++
			}
			for check, n := range tc.want {
				require.Equal(t, n, lines[check], "%s: %v", check, c.Problems)
			}
			if tc.wantNote != "" {
				require.Contains(t, strings.Join(c.Notes, "\n"), tc.wantNote)
			}
			require.Equal(t, tc.wantLeases, c.Leases)
			require.Equal(t, tc.last != nil, slices.Contains(c.Checks, CheckDuplicateID), "duplicate-id needs two reads")
		})
	}
}
