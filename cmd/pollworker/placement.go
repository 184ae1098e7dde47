package main

import (
	"context"
	"time"

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
	ids := m.Placeable()
	ms := make([]assign.Member, len(ids))
	for i, id := range ids {
		ms[i] = assign.Member{ID: id, Weight: 1}
		if info, ok := infos[id]; ok {
			ms[i].Weight = info.PlanWeight()
		}
	}
	f, err := assign.NewFleet(ms...)
	if err != nil { // PlanWeight returns only valid weights
		f = assign.NewFleetIDs(ids...)
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
	Plan    *assign.Plan
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
