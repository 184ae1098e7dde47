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

// planFor is the placement the workers compute for this membership and
// these index bucket sizes (poller/buckets.go: a fleet of the placeable
// members, cordoned ones left out, planned with the default balance
// slack). explain and check call it, so that what they report is what the
// workers do.
func planFor(m nodes.Membership, sizes []int) *assign.Plan {
	return assign.NewFleetIDs(m.Placeable()...).Plan(sizes, poller.DefaultBalanceSlack)
}

// placement is one read of what the workers base their plan on: the live
// members, their heartbeat infos and the bucket sizes of the session index
// (the writers' counts, keyspace.Space.SessionSizes, which is what the
// workers read), with the plan computed from them.
type placement struct {
	Members nodes.Membership
	// Infos are the live members' heartbeat infos by id (missing when
	// expired or malformed).
	Infos map[string]nodes.Info
	// Sizes are the index bucket sizes, indexed by bucket.
	Sizes []int
	Plan  *assign.Plan
}

// readPlacement reads the membership (pruning expired members, as every
// worker does), their infos and the bucket sizes, and plans.
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
	_, sizes, err := store.Sizes(ctx)
	if err != nil {
		return placement{}, err
	}
	p := placement{Members: m, Infos: make(map[string]nodes.Info, len(infos)), Sizes: sizes, Plan: planFor(m, sizes)}
	for _, info := range infos {
		p.Infos[info.ID] = info
	}
	return p, nil
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
