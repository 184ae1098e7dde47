package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// planFor is the placement the workers compute for this membership, these
// heartbeat infos (their weights) and these index bucket weights
// (poller/buckets.go: a fleet of the placeable members, cordoned ones left
// out, each weighing its heartbeat's weight, planned with the default
// balance slack by the loads, or the sizes of an index whose loads are
// incomplete). explain and check call it, so that what they report is
// what the workers do.
func planFor(m nodes.Membership, infos map[string]nodes.Info, weights []int) *assign.Plan {
	return planSpace(m, infos, "", weights)
}

// planSpace is planFor for the units of selector sel ("" for the sessions
// without one): a fleet of the placeable members whose labels match it
// (poller/buckets.go planSpaces), with its own rankings. With no matching
// member, the plan places nothing.
func planSpace(m nodes.Membership, infos map[string]nodes.Info, sel string, weights []int) *assign.Plan {
	var ms []assign.Member
	for _, id := range m.Placeable() {
		info, ok := infos[id]
		if sel != "" && (!ok || !info.Labels.MatchesSelector(sel)) {
			continue
		}
		mem := assign.Member{ID: id, Weight: 1}
		if ok {
			mem.Weight = info.PlanWeight()
		}
		ms = append(ms, mem)
	}
	f, err := assign.NewFleetIn(sel, ms...)
	if err != nil { // PlanWeight returns only valid weights
		f, _ = assign.NewFleetIn(sel)
	}
	return f.Plan(weights, poller.DefaultBalanceSlack)
}

// placement is one read of what the workers base their plan on: the live
// members, their heartbeat infos (with their weights) and the bucket sizes
// and loads of the session index (the writers' counts,
// keyspace.Space.SessionSizes and SessionLoads, which is what the workers
// read), with the plan computed from them.
type placement struct {
	Members nodes.Membership
	// Infos are the live members' heartbeat infos by id (missing when
	// expired or malformed).
	Infos map[string]nodes.Info
	// Sizes are the index bucket sizes, indexed by bucket.
	Sizes []int
	// Weights are the sizes and loads; the plan weighs Weights.Plannable.
	Weights session.Weights
	// Plan places the sessions without a selector.
	Plan *assign.Plan
	// Spaces place the sessions of each selector (canonical) among the
	// matching workers; a plan of no worker when none matches.
	Spaces map[string]*assign.Plan
	// selectors are the sessions' canonical selectors, by id, once learn
	// was given the sessions (OwnerOf needs them).
	selectors map[string]string
}

// learn records the selectors of sessions, for OwnerOf, and plans the
// selectors the index's loads did not name (a session written behind the
// store's back, or a selector whose loads are not counted yet).
func (p *placement) learn(sessions []session.Session) {
	p.selectors = make(map[string]string)
	if p.Spaces == nil {
		p.Spaces = make(map[string]*assign.Plan)
	}
	for _, s := range sessions {
		if sel := s.SelectorKey(); sel != "" {
			p.selectors[s.ID] = sel
			if _, ok := p.Spaces[sel]; !ok {
				p.Spaces[sel] = planSpace(p.Members, p.Infos, sel, nil)
			}
		}
	}
}

// PlanOf is the plan that places sessions of the canonical selector sel.
func (p placement) PlanOf(sel string) *assign.Plan {
	if sel == "" {
		return p.Plan
	}
	if sp, ok := p.Spaces[sel]; ok {
		return sp
	}
	return planSpace(p.Members, p.Infos, sel, nil)
}

// OwnerOf is the planned owner of session id ("" for none: no worker, or
// none matching its selector); learn must have seen the sessions.
func (p placement) OwnerOf(id string) string {
	return p.PlanOf(p.selectors[id]).OwnerOf(id)
}

// Unplaceable reports whether no live placeable worker matches the
// canonical selector sel (never for "": any worker will do).
func (p placement) Unplaceable(sel string) bool {
	return sel != "" && p.PlanOf(sel).Fleet().Len() == 0
}

// PlannedLoad is the load all plans place on worker id.
func (p placement) PlannedLoad(id string) int {
	n := p.Plan.Load(id)
	for _, sp := range p.Spaces {
		n += sp.Load(id)
	}
	return n
}

// readPlacement reads the membership (pruning expired members, as every
// worker does), their infos and the bucket sizes and loads, and plans.
func readPlacement(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, store *session.Store) (placement, error) {
	reader, err := nodes.NewReader(client, keys, nil)
	if err != nil {
		return placement{}, err
	}
	m, err := reader.Members(ctx)
	if err != nil {
		return placement{}, err
	}
	infos, err := reader.Get(ctx, m.Nodes...)
	if err != nil {
		return placement{}, err
	}
	w, err := store.Weights(ctx)
	if err != nil {
		return placement{}, err
	}
	p := placement{Members: m, Infos: make(map[string]nodes.Info, len(infos)), Sizes: w.Sizes, Weights: w}
	for _, info := range infos {
		p.Infos[info.ID] = info
	}
	p.Plan = planFor(m, p.Infos, w.Plannable())
	p.Spaces = make(map[string]*assign.Plan, len(w.Spaces))
	for sel, sp := range w.Spaces {
		p.Spaces[sel] = planSpace(m, p.Infos, sel, sp.Loads)
	}
	return p, nil
}

// loadUnit names what the plan weighs: "polls/day", or "sessions" for an
// index whose loads are incomplete.
func (p placement) loadUnit() string {
	if p.Weights.Complete {
		return "polls/day"
	}
	return "sessions"
}

// ServerTime is the Redis clock when the members were read.
func (p placement) ServerTime() time.Time { return time.UnixMilli(p.Members.ServerTimeMs).UTC() }

// liveHolder says whether a lease owner (holder id and incarnation) is a
// live worker's current incarnation. An owner value or a heartbeat without
// an incarnation (written before incarnations existed) cannot be told
// apart, and counts as current, as status counts it.
func (p placement) liveHolder(holder, incarnation string) (live, current bool) {
	if !p.Members.Contains(holder) {
		return false, false
	}
	info, ok := p.Infos[holder]
	return true, incarnation == "" || !ok || info.Incarnation == "" || info.Incarnation == incarnation
}

// placementMetrics exports what the placement rules leave unplaced.
func placementMetrics(c *poller.Coordinator) []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pollworker_sessions_unplaceable",
		Help: "Active sessions whose selector no live worker's labels match: polled by nobody until one joins. A fleet-wide figure, the same on every worker (use max)."},
		func() float64 { return float64(c.Unplaceable()) })}
}
