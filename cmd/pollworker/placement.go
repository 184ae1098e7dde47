package main

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

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
	// placed is every space's plan, as the workers compute it (package
	// fleet).
	placed fleet.Placement
	// selectors are the sessions' selectors, by id, once learn was given
	// the sessions (OwnerOf needs them).
	selectors map[string]fleet.Selector
}

// newPlacement plans as the workers do (fleet.Planner.Place, with the
// default balance slack) for membership m, the members' heartbeat infos and
// the index's bucket weights.
func newPlacement(m nodes.Membership, infos map[string]nodes.Info, w session.Weights) (placement, error) {
	ms := fleet.WeighMembers(m.Placeable(), slices.Collect(maps.Values(infos)))
	placed, err := fleet.NewPlanner(poller.DefaultBalanceSlack).Place(ms, w.Plannable(), w.Spaces, nil)
	if err != nil {
		return placement{}, err
	}
	return placement{Members: m, Infos: infos, Sizes: w.Sizes, Weights: w, Plan: placed.Default, placed: placed}, nil
}

// learn records the selectors of sessions, for OwnerOf.
func (p *placement) learn(sessions []session.Session) {
	p.selectors = make(map[string]fleet.Selector)
	for _, s := range sessions {
		if sel := fleet.SelectorOf(s); !sel.IsNone() {
			p.selectors[s.ID] = sel
		}
	}
}

// selector parses the canonical selector sel; one that does not parse
// selects no worker.
func selector(sel string) (fleet.Selector, bool) {
	s, err := fleet.ParseSelector(sel)
	return s, err == nil
}

// PlanOf is the plan that places sessions of the canonical selector sel
// (fleet.Placement.PlanOf).
func (p placement) PlanOf(sel string) *assign.Plan {
	s, ok := selector(sel)
	if !ok {
		f, _ := assign.NewFleetIn(sel)
		return f.Plan(nil, poller.DefaultBalanceSlack)
	}
	return p.placed.PlanOf(s)
}

// OwnerOf is the planned owner of session id ("" for none: no worker, or
// none matching its selector); learn must have seen the sessions.
func (p placement) OwnerOf(id string) string {
	return p.placed.OwnerOf(id, p.selectors[id])
}

// Unplaceable reports whether no live placeable worker matches the
// canonical selector sel (never for "": any worker will do).
func (p placement) Unplaceable(sel string) bool {
	s, ok := selector(sel)
	return !ok || !p.placed.Placeable(s)
}

// PlannedLoad is the load all plans place on worker id.
func (p placement) PlannedLoad(id string) int { return p.placed.Load(id) }

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
	byID := make(map[string]nodes.Info, len(infos))
	for _, info := range infos {
		byID[info.ID] = info
	}
	return newPlacement(m, byID, w)
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
