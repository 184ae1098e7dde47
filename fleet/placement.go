package fleet

import (
	"fmt"
	"math"
	"strings"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// Selector is a parsed session selector (session.Session.Selector): the
// label pairs a worker must carry to poll the session. The zero Selector
// is "none": every worker matches it. A Selector is a value.
type Selector struct {
	key   string       // canonical form, "" for none
	pairs nodes.Labels // parsed pairs
	bad   bool         // the text did not parse: it matches no worker
}

// ParseSelector parses a selector in any form nodes.ParseLabels accepts
// ("zone=eu-1,egress=static"; "" is none).
func ParseSelector(s string) (Selector, error) {
	l, err := nodes.ParseLabels(s)
	if err != nil {
		return Selector{}, fmt.Errorf("fleet: selector: %w", err)
	}
	return Selector{key: l.String(), pairs: l}, nil
}

// SelectorOf is the selector of session s. One that does not parse (which
// session.Session.Validate rejects) matches no worker: such a session is
// polled by nobody rather than by anybody.
func SelectorOf(s session.Session) Selector {
	sel, err := ParseSelector(s.Selector)
	if err != nil {
		return Selector{key: s.Selector, bad: true}
	}
	return sel
}

// selectorOfKey is the selector of a placement space's name as stored (the
// canonical selector in the sizes and loads hashes); a name that does not
// parse selects no worker, so its sessions are unplaceable.
func selectorOfKey(key string) Selector {
	sel, err := ParseSelector(key)
	if err != nil {
		return Selector{key: key, bad: true}
	}
	sel.key = key // as stored: the space's name
	return sel
}

// String is the canonical form ("" for none): the name of the selector's
// placement space (assign.SpaceKey).
func (s Selector) String() string { return s.key }

// IsNone reports whether s is no selector: every worker may poll.
func (s Selector) IsNone() bool { return s.key == "" }

// Matches reports whether a worker with labels l may poll the sessions of
// s: l includes every pair of s.
func (s Selector) Matches(l nodes.Labels) bool { return !s.bad && l.Matches(s.pairs) }

// Members are the placeable workers as the planner weighs them: their ids,
// the weights of their heartbeats (1 when missing), their labels and the
// balance slack they agree on (AgreedSlack). It is a value; build it with
// WeighMembers or Equal.
type Members struct {
	list   []assign.Member
	labels map[string]nodes.Labels
	key    string
	slack  float64 // AgreedSlack of the members' infos; valid when slackSet
	// slackSet: some member published its slack; a Planner plans with
	// slack then, else with its own.
	slackSet   bool
	slackMixed bool // the members published different slacks
}

// AgreedSlack is the balance slack a fleet plans with, from the slacks its
// members publish (nodes.Info.BalanceSlack; 0, from a worker that predates
// it, says nothing): the smallest bound any member asks for, or off
// (negative) when every member that says asks for none. Every worker must
// plan with the same slack, or two may each think a bucket is the other's
// and leave it unpolled until the orphan watch; taking the tightest makes
// a fleet of mixed configurations agree without asking who is right.
// ok is false when no member says; mixed when members said different
// values.
func AgreedSlack(infos []nodes.Info) (slack float64, ok, mixed bool) {
	for _, info := range infos {
		s := info.BalanceSlack
		if s == 0 || math.IsNaN(s) {
			continue
		}
		if s < 0 {
			s = -1 // every "off" is the same
		}
		switch {
		case !ok:
			slack, ok = s, true
		case s != slack:
			mixed = true
			if slack < 0 || (s > 0 && s < slack) {
				slack = s
			}
		}
	}
	return slack, ok, mixed
}

// ReadingSessions splits the members ids into those that read the session
// namespace ns (or do not say: nodes.Info.Sessions empty, or no info) and
// those whose heartbeat says they read another. Only the first take part
// in placement: a worker started with another --session-prefix under the
// same key prefix cannot see the sessions planned onto it, so they would
// wait, unpolled, for the orphan watch.
func ReadingSessions(ids []string, infos []nodes.Info, ns string) (same, other []string) {
	elsewhere := make(map[string]bool)
	for _, info := range infos {
		if info.Sessions != "" && info.Sessions != ns {
			elsewhere[info.ID] = true
		}
	}
	if len(elsewhere) == 0 {
		return ids, nil
	}
	for _, id := range ids {
		if elsewhere[id] {
			other = append(other, id)
		} else {
			same = append(same, id)
		}
	}
	return same, other
}

// WeighMembers returns the placeable members ids (nodes.Membership.Placeable:
// cordoned workers take nothing) with the weights (nodes.Info.PlanWeight)
// and labels of their heartbeat infos, and the slack they agree on
// (AgreedSlack); a member without an info weighs 1 and has no labels.
// Infos of other ids are ignored.
func WeighMembers(ids []string, infos []nodes.Info) Members {
	w := make(map[string]float64, len(infos))
	labels := make(map[string]nodes.Labels, len(infos))
	member := make(map[string]bool, len(ids))
	for _, id := range ids {
		member[id] = true
	}
	theirs := make([]nodes.Info, 0, len(ids))
	for _, info := range infos {
		if !member[info.ID] {
			continue
		}
		w[info.ID] = info.PlanWeight()
		if len(info.Labels) > 0 {
			labels[info.ID] = info.Labels
		}
		theirs = append(theirs, info)
	}
	ms := Members{list: make([]assign.Member, len(ids)), labels: labels}
	ms.slack, ms.slackSet, ms.slackMixed = AgreedSlack(theirs)
	var key strings.Builder
	for i, id := range ids {
		weight, ok := w[id]
		if !ok {
			weight = 1
		}
		ms.list[i] = assign.Member{ID: id, Weight: weight}
		fmt.Fprintf(&key, "%s=%g{%s};", id, weight, labels[id])
	}
	if ms.slackSet {
		fmt.Fprintf(&key, "slack=%g", ms.slack)
	}
	ms.key = key.String()
	return ms
}

// Equal returns members ids of equal weights and no labels.
func Equal(ids ...string) Members { return WeighMembers(ids, nil) }

// Key changes with any member, weight or label: two Members with the same
// key plan alike.
func (m Members) Key() string { return m.key }

// Len is the number of members.
func (m Members) Len() int { return len(m.list) }

// Slack is the slack a Planner plans these members with: the one they
// agree on (AgreedSlack), else fallback (the planner's own); mixed reports
// that they published different values.
func (m Members) Slack(fallback float64) (slack float64, mixed bool) {
	if m.slackSet {
		return m.slack, m.slackMixed
	}
	return fallback, false
}

// Weight is member id's planner weight, 1 when it is not a member.
func (m Members) Weight(id string) float64 {
	for _, mem := range m.list {
		if mem.ID == id {
			return mem.Weight
		}
	}
	return 1
}

// Matching returns the members whose labels match sel, in order.
func (m Members) Matching(sel Selector) []assign.Member {
	if sel.IsNone() {
		return m.list
	}
	var out []assign.Member
	for _, mem := range m.list {
		if sel.Matches(m.labels[mem.ID]) {
			out = append(out, mem)
		}
	}
	return out
}

// Planner computes placements, keeping each placement space's
// assign.Fleet while its members stay the same (building a fleet ranks
// every bucket). It is not safe for concurrent use.
type Planner struct {
	slack  float64
	fleets map[string]keyedFleet // selector -> its fleet
}

// keyedFleet is a fleet and the Members key it was built for.
type keyedFleet struct {
	key   string
	fleet *assign.Fleet
}

// NewPlanner returns a Planner that bounds loads with slack
// (assign.Fleet.Plan; negative: unbounded) when the members it plans for
// publish none (Members.Slack).
func NewPlanner(slack float64) *Planner {
	return &Planner{slack: slack, fleets: make(map[string]keyedFleet)}
}

// Fleet returns the fleet of the members matching sel, in sel's placement
// space (assign.NewFleetIn), the one built before when the members are the
// same.
func (p *Planner) Fleet(ms Members, sel Selector) (*assign.Fleet, error) {
	if kf, ok := p.fleets[sel.key]; ok && kf.key == ms.key {
		return kf.fleet, nil
	}
	f, err := assign.NewFleetIn(sel.key, ms.Matching(sel)...)
	if err != nil {
		return nil, fmt.Errorf("fleet: selector %q: %w", sel.key, err)
	}
	p.fleets[sel.key] = keyedFleet{key: ms.key, fleet: f}
	return f, nil
}

// Place plans the sessions without a selector by the bucket weights
// weights (polls per day, or sizes while loads are incomplete:
// session.Weights.Plannable), and the units of each selector of spaces
// among the members that match it, by that space's loads. planned, when
// not nil, says which selectors to plan (a worker plans those it matches);
// the sessions of a selector no member matches are unplaceable. Fleets of
// selectors not planned are forgotten.
func (p *Planner) Place(ms Members, weights []int, spaces map[string]*session.Space, planned func(Selector) bool) (Placement, error) {
	f, err := p.Fleet(ms, Selector{})
	if err != nil {
		return Placement{}, err
	}
	slack, _ := ms.Slack(p.slack)
	pl := Placement{Default: f.Plan(weights, slack), members: ms, slack: slack, spaces: make(map[string]*assign.Plan)}
	for key, sp := range spaces {
		sel := selectorOfKey(key)
		if len(ms.Matching(sel)) == 0 {
			if pl.unplaceable == nil {
				pl.unplaceable = make(map[string]int)
			}
			for _, n := range sp.Sizes {
				pl.unplaceable[key] += n
			}
			continue
		}
		if planned != nil && !planned(sel) {
			continue
		}
		sf, err := p.Fleet(ms, sel)
		if err != nil {
			return Placement{}, err
		}
		pl.spaces[key] = sf.Plan(sp.Loads, slack)
	}
	for key := range p.fleets {
		if _, ok := pl.spaces[key]; !ok && key != "" {
			delete(p.fleets, key)
		}
	}
	return pl, nil
}

// Plan is the placement of one space's buckets (package assign's Plan):
// owner, orphan watcher, loads and caps per worker.
type Plan = assign.Plan

// Placement is where the buckets of every placement space go, for one set
// of members and bucket weights: the default space (sessions without a
// selector) and each selector's. It is immutable.
type Placement struct {
	// Default places the sessions without a selector.
	Default     *assign.Plan
	spaces      map[string]*assign.Plan // selector -> its plan (those planned)
	unplaceable map[string]int          // selector -> its sessions, when no member matches it
	members     Members
	slack       float64
}

// Planned returns the plan of sel's units, if Place planned it (always
// Default for none).
func (pl Placement) Planned(sel Selector) (*assign.Plan, bool) {
	if sel.IsNone() {
		return pl.Default, pl.Default != nil
	}
	p, ok := pl.spaces[sel.key]
	return p, ok
}

// PlanOf returns the plan of sel's units: the one Place made, else (a
// selector whose loads are not counted yet, or not planned) one of no
// loads among the matching members, which ranks and owns alike but bounds
// nothing. With no matching member it places nothing.
func (pl Placement) PlanOf(sel Selector) *assign.Plan {
	if p, ok := pl.Planned(sel); ok {
		return p
	}
	f, err := assign.NewFleetIn(sel.key, pl.members.Matching(sel)...)
	if err != nil { // WeighMembers makes only valid weights
		f, _ = assign.NewFleetIn(sel.key)
	}
	return f.Plan(nil, pl.slack)
}

// Plans returns every plan Place made, the default space's first.
func (pl Placement) Plans() []*assign.Plan {
	out := []*assign.Plan{pl.Default}
	for _, p := range pl.spaces {
		out = append(out, p)
	}
	return out
}

// OwnerOf returns the preferred worker of session id with selector sel, ""
// for none (no member, or none that matches sel).
func (pl Placement) OwnerOf(id string, sel Selector) string {
	return pl.PlanOf(sel).OwnerOf(id)
}

// Placeable reports whether some member matches sel (always for none).
func (pl Placement) Placeable(sel Selector) bool {
	return sel.IsNone() || len(pl.members.Matching(sel)) > 0
}

// Unplaceable returns the number of active sessions (by the writers'
// counts) whose selector no member matches: polled by nobody.
func (pl Placement) Unplaceable() int {
	n := 0
	for _, c := range pl.unplaceable {
		n += c
	}
	return n
}

// Load returns the load all plans place on worker id.
func (pl Placement) Load(id string) int {
	n := 0
	for _, p := range pl.Plans() {
		n += p.Load(id)
	}
	return n
}

// Members returns the members placed on.
func (pl Placement) Members() Members { return pl.members }

// Buckets returns the buckets worker me reads: true for those it owns in
// some plan (definitions are read), false for those it only watches for
// orphans (ids only).
func (pl Placement) Buckets(me string) map[int]bool {
	want := make(map[int]bool)
	for _, p := range pl.Plans() {
		for b := range assign.Buckets {
			switch {
			case p.Owner(b) == me:
				want[b] = true
			case p.Watcher(b) == me && !want[b]:
				want[b] = false
			}
		}
	}
	return want
}
