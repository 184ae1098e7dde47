package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// maxUnownedShown is how many unowned session ids status lists.
const maxUnownedShown = 10

// statusReaderID is the node id of the registry status reads through; it
// never heartbeats, so it never appears among the members.
const statusReaderID = "pollworker-status"

// clusterStatus is what `pollworker status` reports: one consistent-enough
// look at the deployment (it is read in a few round trips, not atomically).
type clusterStatus struct {
	// ServerTime is the Redis server's clock when the members were read.
	ServerTime time.Time `json:"server_time"`
	// Nodes are the live workers, sorted by id.
	Nodes []nodeStatus `json:"nodes"`
	// Sessions counts the sessions.
	Sessions sessionCounts `json:"sessions"`
	// Malformed are the malformed session entries.
	Malformed []malformedEntry `json:"malformed"`
	// Leases counts the leases of the active sessions.
	Leases leaseCounts `json:"leases"`
	// UnownedSample are the first (by id) active sessions without a lease.
	UnownedSample []string `json:"unowned_sample"`
	// OtherHolders hold leases but are not live: workers that crashed or
	// left less than a lease TTL ago. Sorted by id.
	OtherHolders []holderCount `json:"other_holders"`
	// Balance compares the leases of the live workers.
	Balance balance `json:"balance"`
}

// nodeStatus is one live worker.
type nodeStatus struct {
	ID string `json:"id"`
	// Host, PID, Version and Started come from the worker's heartbeat info;
	// they are empty when the info expired or is malformed.
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Version string    `json:"version,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// ExpiresInMs is how long the worker stays live without another
	// heartbeat, by the server's clock.
	ExpiresInMs int64 `json:"expires_in_ms"`
	// Leases is the number of active sessions whose lease it holds.
	Leases int `json:"leases"`
}

// sessionCounts counts the session entries.
type sessionCounts struct {
	// Total is the number of valid sessions: Active + Paused.
	Total     int `json:"total"`
	Active    int `json:"active"`
	Paused    int `json:"paused"`
	Malformed int `json:"malformed"`
}

// leaseCounts counts the leases of the active sessions.
type leaseCounts struct {
	// Held is the number of active sessions with a lease: ByLive + ByOthers.
	Held     int `json:"held"`
	ByLive   int `json:"by_live_nodes"`
	ByOthers int `json:"by_other_holders"`
	// Unowned is the number of active sessions without a lease.
	Unowned int `json:"unowned"`
}

// holderCount is a lease holder that is not a live node.
type holderCount struct {
	ID     string `json:"id"`
	Leases int    `json:"leases"`
}

// balance compares the leases of the live nodes.
type balance struct {
	// Max is the most leases one live node holds.
	Max int `json:"max"`
	// Mean is ByLive / number of live nodes.
	Mean float64 `json:"mean"`
	// MaxOverMean is Max / Mean: 1 is perfect; 0 when there is nothing to
	// compare.
	MaxOverMean float64 `json:"max_over_mean"`
}

// computeStatus reads the membership, the sessions and the leases of the
// active sessions. It prunes expired members from the node index (as every
// worker does) and writes nothing else.
func computeStatus(ctx context.Context, client redis.UniversalClient, keys keyspace.Space) (clusterStatus, error) {
	reg, err := nodes.New(nodes.Config{Client: client, Keys: keys, ID: statusReaderID})
	if err != nil {
		return clusterStatus{}, err
	}
	m, err := reg.Members(ctx)
	if err != nil {
		return clusterStatus{}, err
	}
	infos, err := reg.Get(ctx, m.Nodes...)
	if err != nil {
		return clusterStatus{}, err
	}
	store, err := session.NewStore(client, keys)
	if err != nil {
		return clusterStatus{}, err
	}
	sessions, problems, err := store.List(ctx)
	if err != nil {
		return clusterStatus{}, err
	}
	var active []string
	for _, s := range sessions {
		if !s.Paused {
			active = append(active, s.ID)
		}
	}
	var holdings []lease.Holding
	if len(active) > 0 {
		if holdings, err = lease.Inspect(ctx, client, keys, active, 0); err != nil {
			return clusterStatus{}, err
		}
	}
	return buildStatus(m, infos, sessions, problems, holdings), nil
}

// buildStatus combines what computeStatus read.
func buildStatus(m nodes.Membership, infos []nodes.Info, sessions []session.Session, problems []session.Problem, holdings []lease.Holding) clusterStatus {
	st := clusterStatus{
		ServerTime:    time.UnixMilli(m.ServerTimeMs).UTC(),
		Nodes:         make([]nodeStatus, len(m.Nodes)),
		Malformed:     malformedEntries(problems),
		UnownedSample: []string{},
		OtherHolders:  []holderCount{},
	}
	byID := make(map[string]*nodeStatus, len(m.Nodes))
	for i, id := range m.Nodes {
		st.Nodes[i] = nodeStatus{ID: id, ExpiresInMs: m.ExpiryMs[i] - m.ServerTimeMs}
		byID[id] = &st.Nodes[i]
	}
	for _, info := range infos {
		if n, ok := byID[info.ID]; ok {
			n.Host, n.PID, n.Version, n.Started = info.Host, info.PID, info.Version, info.Started
		}
	}

	st.Sessions.Total = len(sessions)
	st.Sessions.Malformed = len(problems)
	for _, s := range sessions {
		if s.Paused {
			st.Sessions.Paused++
		}
	}
	st.Sessions.Active = st.Sessions.Total - st.Sessions.Paused

	others := map[string]int{}
	for _, h := range holdings {
		if h.Owner == "" {
			st.Leases.Unowned++
			if len(st.UnownedSample) < maxUnownedShown {
				st.UnownedSample = append(st.UnownedSample, h.Session)
			}
			continue
		}
		st.Leases.Held++
		holder := lease.HolderOf(h.Owner)
		if n, ok := byID[holder]; ok {
			n.Leases++
			st.Leases.ByLive++
		} else {
			others[holder]++
			st.Leases.ByOthers++
		}
	}
	for id, n := range others {
		st.OtherHolders = append(st.OtherHolders, holderCount{ID: id, Leases: n})
	}
	slices.SortFunc(st.OtherHolders, func(a, b holderCount) int { return cmp.Compare(a.ID, b.ID) })

	if len(st.Nodes) > 0 {
		for _, n := range st.Nodes {
			st.Balance.Max = max(st.Balance.Max, n.Leases)
		}
		st.Balance.Mean = float64(st.Leases.ByLive) / float64(len(st.Nodes))
		if st.Balance.Mean > 0 {
			st.Balance.MaxOverMean = float64(st.Balance.Max) / st.Balance.Mean
		}
	}
	return st
}

// String is a one-line summary, for logs and tests.
func (b balance) String() string {
	return fmt.Sprintf("max %d, mean %.2f leases per live node (max/mean %.2f)", b.Max, b.Mean, b.MaxOverMean)
}
