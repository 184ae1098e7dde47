package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
)

// maxUnownedShown is how many session ids status lists per kind (unowned,
// not polled, unknown).
const maxUnownedShown = 10

// clusterStatus is what `pollworker status` reports: one consistent-enough
// look at the deployment (it is read in a few round trips, not atomically).
type clusterStatus struct {
	// ServerTime is the Redis server's clock when the members were read.
	ServerTime time.Time `json:"server_time"`
	// Nodes are the live workers, sorted by id.
	Nodes []nodeStatus `json:"nodes"`
	// JunkMembers are the entries of the node index that are not live
	// workers (invalid ids, or no heartbeat key): ignored by the workers.
	JunkMembers []nodes.Junk `json:"junk_members,omitempty"`
	// RedisFull says, per master at its maxmemory under noeviction, that
	// it refuses writes (check's redis-memory); empty otherwise.
	RedisFull []string `json:"redis_full,omitempty"`
	// CordonsSuspended: every live worker is cordoned, so the cordons
	// count for nothing until one is lifted (nodes.Membership.CordonsSuspended).
	CordonsSuspended bool `json:"cordons_suspended,omitempty"`
	// Sessions counts the sessions.
	Sessions sessionCounts `json:"sessions"`
	// Malformed are the malformed session entries.
	Malformed []malformedEntry `json:"malformed"`
	// Leases counts the leases of the active sessions.
	Leases leaseCounts `json:"leases"`
	// UnownedSample are the first (by id) active sessions without a lease.
	UnownedSample []string `json:"unowned_sample"`
	// NotPolledSample are the first (by id) active sessions whose lease is
	// held by a holder that is not polling them (ByPrevious + ByOthers).
	NotPolledSample []string `json:"not_polled_sample"`
	// OtherHolders hold leases of active sessions but are not polling
	// them: ids that are not live (crashed or left less than a lease TTL
	// ago), and earlier incarnations of live ids (a worker killed and
	// restarted with the same id). Sorted by id, then incarnation.
	OtherHolders []holderCount `json:"other_holders"`
	// UnknownLeases are the leases of sessions that are not in the store.
	UnknownLeases unknownLeases `json:"unknown_leases"`
	// LossQuarantine counts the unowned sessions that wait out the loss
	// quarantine (a new keyspace, or Redis lost data): a wait, not a
	// failure.
	LossQuarantine quarantineView `json:"loss_quarantine"`
	// Balance compares the leases of the live workers.
	Balance balance `json:"balance"`
	// PlanUnit is what Planned counts: "polls/day" (the writers' loads),
	// or "sessions" for an index whose loads are incomplete (written
	// before loads were kept; pollworker sessions reweigh).
	PlanUnit string `json:"plan_unit"`
	// PollBalance compares the poll rates the live workers hold, each
	// over its weight: max over mean of rate/weight.
	PollBalance float64 `json:"poll_balance"`
	// PollBalanceByLabels is, when the placeable workers carry more than
	// one set of labels (zones, egress pools), the poll balance among the
	// workers of each set, by labels: workers with the same labels can
	// take the same sessions, so each set should be even, while sets
	// rightly differ when their sessions' selectors ask for more of one.
	PollBalanceByLabels []labelBalance `json:"poll_balance_by_labels,omitempty"`
	// Unplaceable are the active sessions whose selector no live,
	// placeable worker's labels match: polled by nobody until one joins.
	Unplaceable unplaceable `json:"unplaceable"`
}

// unplaceable counts the sessions with no matching worker.
type unplaceable struct {
	Count int `json:"count"`
	// BySelector counts them per selector.
	BySelector map[string]int `json:"by_selector"`
	// Sample are the first (by id) of them.
	Sample []string `json:"sample"`
}

// nodeStatus is one live worker.
type nodeStatus struct {
	ID string `json:"id"`
	// Host, PID, Version, Started and Incarnation come from the worker's
	// heartbeat info; they are empty when the info expired or is
	// malformed, and Incarnation when the worker predates incarnations.
	Host        string    `json:"host,omitempty"`
	PID         int       `json:"pid,omitempty"`
	Version     string    `json:"version,omitempty"`
	Started     time.Time `json:"started,omitzero"`
	Incarnation string    `json:"incarnation,omitempty"`
	// ExpiresInMs is how long the worker stays live without another
	// heartbeat, by the server's clock.
	ExpiresInMs int64 `json:"expires_in_ms"`
	// HeartbeatAgeMs is the time since its last heartbeat; -1 when unknown.
	HeartbeatAgeMs int64 `json:"heartbeat_age_ms"`
	// Planned is the load the planner places on this worker, in
	// clusterStatus.PlanUnit: its buckets' polls per day (or sessions,
	// paused ones included, when loads are incomplete).
	Planned int `json:"planned"`
	// Weight is the capacity the worker declared (--weight; 1 when unset).
	Weight float64 `json:"weight"`
	// Labels are the worker's labels (--labels), from its heartbeat.
	Labels map[string]string `json:"labels,omitempty"`
	// PollsPerSecond is the planned poll rate of the active sessions whose
	// lease this worker holds: the sum of their loads (1/interval, or a
	// scheduled session's slots per day) per second, not the rate the
	// worker achieves (pollworker_polls_achieved_per_second).
	PollsPerSecond float64 `json:"polls_per_second"`
	// Cordoned is set for a worker cordoned by pollworker drain: it takes
	// no sessions and hands off those it holds.
	Cordoned bool `json:"cordoned"`
	// OtherSessions is the session namespace of a worker that reads
	// another than this command's --session-prefix: the workers leave it
	// out of placement (fleet.ReadingSessions). Empty for the others.
	OtherSessions string `json:"other_session_namespace,omitempty"`
	// Leases is the number of active sessions whose lease this incarnation
	// holds (or a holder with this id whose incarnation is unknown).
	Leases int `json:"leases"`
	// Behind says why the worker is behind, as of its last heartbeat;
	// empty while it keeps up.
	Behind string `json:"behind,omitempty"`
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
	// Held is the number of active sessions with a lease: ByLive +
	// ByPrevious + ByOthers.
	Held int `json:"held"`
	// ByLive are held by the live incarnation of a live node: polled.
	ByLive int `json:"by_live_nodes"`
	// ByPrevious are held by an earlier incarnation of a live node's id:
	// not polled until the lease expires.
	ByPrevious int `json:"by_previous_incarnations"`
	// ByOthers are held by ids that are not live: not polled until the
	// lease expires.
	ByOthers int `json:"by_other_holders"`
	// Unowned is the number of active sessions without a lease.
	Unowned int `json:"unowned"`
	// NotPolled is the number of active sessions nobody polls now:
	// ByPrevious + ByOthers + Unowned.
	NotPolled int `json:"not_polled"`
	// NotPlanned are held by a live worker that the planner (package
	// assign, as the workers run it) does not place them on: moving, held
	// back for a lease TTL after a recent move, or adopted as orphans.
	NotPlanned int `json:"not_planned"`
}

// holderCount is a lease holder that is not polling its sessions.
type holderCount struct {
	ID string `json:"id"`
	// Incarnation is the holder's incarnation, "" when its owner values
	// predate incarnations.
	Incarnation string `json:"incarnation,omitempty"`
	// Previous is set when ID is live but under another incarnation.
	Previous bool `json:"previous_incarnation"`
	Leases   int  `json:"leases"`
	// ExpiresInMs is when its last lease expires at the latest.
	ExpiresInMs int64 `json:"expires_in_ms"`
}

// unknownLeases are lease keys whose session is not in the store (removed
// while its holder was down, or written by hand). Finding them takes a SCAN
// of the keyspace, which status does only when asked.
type unknownLeases struct {
	// Scanned is false when the SCAN was skipped; Count is then 0.
	Scanned bool `json:"scanned"`
	// Skipped says why a SCAN that was asked for did not run.
	Skipped string `json:"skipped,omitempty"`
	// At is when the SCAN ran (the status page reuses one for a minute).
	At    time.Time     `json:"at,omitzero"`
	Count int           `json:"count"`
	Lease []leaseHolder `json:"sample"`
}

// leaseHolder is one lease of an unknown session.
type leaseHolder struct {
	Session     string `json:"session"`
	Holder      string `json:"holder"`
	Incarnation string `json:"incarnation,omitempty"`
	ExpiresInMs int64  `json:"expires_in_ms"`
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

// computeStatus reads the fleet, every session and the leases of the
// active ones (fleet.Reader.ReadAll) and, if scan is set, SCANs for lease
// keys of sessions not in the store. It prunes expired members from the
// node index (as every worker does) and writes nothing else.
func computeStatus(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, scan bool) (clusterStatus, error) {
	r, err := fleet.NewReader(client, keys, fleetOptions(poller.DefaultLeaseTTL))
	if err != nil {
		return clusterStatus{}, err
	}
	snap, err := r.ReadAll(ctx)
	if err != nil {
		return clusterStatus{}, err
	}
	st := buildStatus(snap)
	if scan {
		st.UnknownLeases = findUnknownLeases(ctx, r, snap)
	}
	// Redis over its maxmemory refuses writes: no lease is taken, and
	// the sessions shown unowned stay so (best effort: INFO may be refused).
	if full, err := fullMasters(ctx, client); err == nil {
		st.RedisFull = full
	}
	return st, nil
}

// findUnknownLeases SCANs for the leases of sessions the snapshot does
// not know (fleet.Reader.UnknownLeases). A SCAN that fails (a loaded
// Redis, --timeout) is reported as not done, with its error: the rest of
// the status stands without it.
func findUnknownLeases(ctx context.Context, r *fleet.Reader, snap *fleet.Snapshot) unknownLeases {
	u, err := r.UnknownLeases(ctx, snap.Known, maxUnownedShown)
	if err != nil {
		return unknownLeases{Skipped: "the scan failed: " + err.Error(), Lease: []leaseHolder{}}
	}
	out := unknownLeases{Scanned: u.Scanned, Skipped: u.Skipped, At: u.At, Count: u.Count, Lease: []leaseHolder{}}
	for _, l := range u.Sample {
		out.Lease = append(out.Lease, leaseHolder{Session: l.Session, Holder: l.Holder, Incarnation: l.Incarnation, ExpiresInMs: l.Remaining.Milliseconds()})
	}
	return out
}

// buildStatus sums up a snapshot of every session (fleet.Reader.ReadAll).
func buildStatus(snap *fleet.Snapshot) clusterStatus {
	m := snap.Members
	st := clusterStatus{
		ServerTime:       time.UnixMilli(m.ServerTimeMs).UTC(),
		Malformed:        malformedEntries(snap.Malformed),
		JunkMembers:      m.Junk,
		CordonsSuspended: m.CordonsSuspended(),
		UnownedSample:    []string{},
		NotPolledSample:  []string{},
		OtherHolders:     []holderCount{},
		UnknownLeases:    unknownLeases{Lease: []leaseHolder{}},
	}
	st.Nodes = nodeTable(snap)
	byID := make(map[string]*nodeStatus, len(st.Nodes))
	for i := range st.Nodes {
		byID[st.Nodes[i].ID] = &st.Nodes[i]
	}
	st.Unplaceable = unplaceable{BySelector: map[string]int{}, Sample: []string{}}
	active := snap.Active() // sorted by id
	for _, id := range active {
		if !snap.Placeable(id) {
			sel := snap.Sessions[id].Session.SelectorKey()
			st.Unplaceable.Count++
			st.Unplaceable.BySelector[sel]++
			if len(st.Unplaceable.Sample) < maxUnownedShown {
				st.Unplaceable.Sample = append(st.Unplaceable.Sample, id)
			}
		}
	}
	st.PlanUnit = snap.LoadUnit()

	sessions := snap.Definitions()
	st.Sessions.Total = len(sessions)
	st.Sessions.Malformed = len(snap.Malformed)
	st.Sessions.Active = len(active)
	st.Sessions.Paused = st.Sessions.Total - st.Sessions.Active

	type holderKey struct{ id, incarnation string }
	others := map[holderKey]*holderCount{}
	for _, id := range active {
		f := snap.Sessions[id]
		h := f.Lease
		if h.Owner == "" {
			st.Leases.Unowned++
			if len(st.UnownedSample) < maxUnownedShown {
				st.UnownedSample = append(st.UnownedSample, id)
			}
			continue
		}
		st.Leases.Held++
		o := snap.HolderOf(h.Owner)
		if o.Polling() {
			n := byID[o.ID]
			n.Leases++
			n.PollsPerSecond += float64(f.Session.Load()) / 86400 // a scheduled session's slots too
			st.Leases.ByLive++
			if snap.OwnerOf(id) != o.ID {
				st.Leases.NotPlanned++
			}
			continue
		}
		if o.Live {
			st.Leases.ByPrevious++
		} else {
			st.Leases.ByOthers++
		}
		if len(st.NotPolledSample) < maxUnownedShown {
			st.NotPolledSample = append(st.NotPolledSample, id)
		}
		k := holderKey{o.ID, o.Incarnation}
		hc := others[k]
		if hc == nil {
			hc = &holderCount{ID: o.ID, Incarnation: o.Incarnation, Previous: o.Live}
			others[k] = hc
		}
		hc.Leases++
		hc.ExpiresInMs = max(hc.ExpiresInMs, h.Remaining.Milliseconds())
	}
	st.Leases.NotPolled = st.Leases.ByPrevious + st.Leases.ByOthers + st.Leases.Unowned
	for _, hc := range others {
		st.OtherHolders = append(st.OtherHolders, *hc)
	}
	slices.SortFunc(st.OtherHolders, func(a, b holderCount) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Incarnation, b.Incarnation))
	})
	if st.Leases.Unowned > 0 {
		st.LossQuarantine = quarantineOf(snap)
	}

	// Workers that read another session prefix hold nothing by design:
	// they count in neither balance.
	if counted := countBalanced(st.Nodes); counted > 0 {
		for _, n := range st.Nodes {
			st.Balance.Max = max(st.Balance.Max, n.Leases)
		}
		st.Balance.Mean = float64(st.Leases.ByLive) / float64(counted)
		if st.Balance.Mean > 0 {
			st.Balance.MaxOverMean = float64(st.Balance.Max) / st.Balance.Mean
		}
		st.PollBalance = pollBalance(st.Nodes)
		st.PollBalanceByLabels = pollBalanceByLabels(st.Nodes)
	}
	return st
}

// nodeTable is the live workers of a snapshot, with their heartbeat
// infos and the load the workers' plan places on each (no leases).
func nodeTable(snap *fleet.Snapshot) []nodeStatus {
	m := snap.Members
	ns := make([]nodeStatus, len(m.Nodes))
	for i, id := range m.Nodes {
		n := nodeStatus{ID: id, ExpiresInMs: m.ExpiryMs[i] - m.ServerTimeMs, HeartbeatAgeMs: -1, Cordoned: slices.Contains(m.Cordoned, id), Weight: 1,
			Planned: snap.PlannedLoad(id)}
		if info, ok := snap.Infos[id]; ok {
			n.Host, n.PID, n.Version, n.Started, n.Incarnation = info.Host, info.PID, info.Version, info.Started, info.Incarnation
			n.Weight = info.PlanWeight()
			n.Labels = info.Labels
			n.Behind = info.Behind
			if slices.Contains(snap.OtherSessions, id) {
				n.OtherSessions = info.Sessions
			}
			if info.TTLMs > 0 {
				n.HeartbeatAgeMs = max(info.TTLMs-n.ExpiresInMs, 0)
			}
		}
		ns[i] = n
	}
	return ns
}

// withNodes is census with the live workers of a later snapshot (of the
// members only): their leases and poll rates are the census's.
func withNodes(census clusterStatus, snap *fleet.Snapshot) clusterStatus {
	held := make(map[string]nodeStatus, len(census.Nodes))
	for _, n := range census.Nodes {
		held[n.ID] = n
	}
	st := census
	st.ServerTime = time.UnixMilli(snap.Members.ServerTimeMs).UTC()
	st.JunkMembers = snap.Members.Junk
	st.Nodes = nodeTable(snap)
	for i := range st.Nodes {
		if n, ok := held[st.Nodes[i].ID]; ok && n.Incarnation == st.Nodes[i].Incarnation {
			st.Nodes[i].Leases, st.Nodes[i].PollsPerSecond = n.Leases, n.PollsPerSecond
		}
	}
	return st
}

// labelBalance is the poll balance among the placeable workers with one
// set of labels.
type labelBalance struct {
	// Labels is the set, canonical ("k=v,…" sorted by key; "" for none).
	Labels string `json:"labels"`
	// Workers is how many placeable live workers carry exactly it.
	Workers int `json:"workers"`
	// PollBalance is max over mean of their poll rate per unit of weight.
	PollBalance float64 `json:"poll_balance"`
}

// pollBalanceByLabels is the poll balance within each set of labels the
// placeable workers carry, sorted by labels; nil when they all carry the
// same (PollBalance says it all then).
func pollBalanceByLabels(ns []nodeStatus) []labelBalance {
	groups := make(map[string][]nodeStatus)
	for _, n := range ns {
		if n.placeable() {
			key := nodes.Labels(n.Labels).String()
			groups[key] = append(groups[key], n)
		}
	}
	if len(groups) < 2 {
		return nil
	}
	out := make([]labelBalance, 0, len(groups))
	for key, g := range groups {
		out = append(out, labelBalance{Labels: key, Workers: len(g), PollBalance: pollBalance(g)})
	}
	slices.SortFunc(out, func(a, b labelBalance) int { return cmp.Compare(a.Labels, b.Labels) })
	return out
}

// countBalanced is the number of workers the lease balance averages over:
// all but those that read another session prefix.
func countBalanced(ns []nodeStatus) int {
	n := 0
	for _, node := range ns {
		if node.OtherSessions == "" {
			n++
		}
	}
	return n
}

// placeable reports whether the workers plan sessions onto n: not
// cordoned, and reading their session namespace.
func (n nodeStatus) placeable() bool { return !n.Cordoned && n.OtherSessions == "" }

// pollBalance is max over mean of the poll rate per unit of weight of
// the placeable workers (cordoned ones, and those reading another session
// namespace, hold nothing by design), 0 when nobody polls.
func pollBalance(ns []nodeStatus) float64 {
	var rate, weight, worst float64
	for _, n := range ns {
		if !n.placeable() {
			continue
		}
		rate += n.PollsPerSecond
		weight += n.Weight
		worst = max(worst, n.PollsPerSecond/n.Weight)
	}
	if rate == 0 {
		return 0
	}
	return worst / (rate / weight)
}

// String is a one-line summary, for logs and tests.
func (b balance) String() string {
	return fmt.Sprintf("max %d, mean %.2f leases per live node (max/mean %.2f)", b.Max, b.Mean, b.MaxOverMean)
}
