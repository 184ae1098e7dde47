package nodes

import (
	"slices"
	"strings"
	"time"
)

// Membership is one observation of the live workers. It is a value: the
// slices belong to it and must not be modified.
type Membership struct {
	// Version increases, within one Registry, each time the set of Nodes
	// differs from the previous observation; moving expiries do not change
	// it. Zero means no observation yet.
	Version uint64
	// Nodes are the live node ids, sorted.
	Nodes []string
	// ExpiryMs[i] is the expiry of Nodes[i] in Redis server milliseconds
	// since the Unix epoch: the last millisecond at which it counts as live.
	ExpiryMs []int64
	// ServerTimeMs is the Redis server time of the observation, in
	// milliseconds since the Unix epoch.
	ServerTimeMs int64
	// Cordoned are the live nodes that are cordoned (they take no
	// sessions and hand off what they hold), sorted.
	Cordoned []string
	// Junk are the unexpired entries of the node index that are not live
	// workers, sorted by Member: an entry counts as a live worker only if
	// it is a valid worker id (keyspace.ValidateID) and its heartbeat key
	// (keyspace.Space.Node) holds its Info. Junk takes no session;
	// pollworker forget removes it.
	Junk []Junk
}

// Junk is an entry of the node index that is not a live worker: written
// by hand or by another program, or, for a moment, that of a worker that
// has just left or whose heartbeat key has just expired.
type Junk struct {
	// Member is the entry as stored (any bytes).
	Member string `json:"member"`
	// Problem says why it is not a live worker.
	Problem string `json:"problem"`
}

// WrongType reports whether the entry is left out because its heartbeat
// key is of the wrong type (written around pollworker): the worker, if
// it runs, cannot heartbeat until the key is deleted.
func (j Junk) WrongType() bool { return strings.HasSuffix(j.Problem, heartbeatWrongType) }

// Placeable returns the live nodes that are not cordoned: those the
// planner places sessions on, sorted. When every live node is cordoned
// (CordonsSuspended), every one is placeable: a cordon moves sessions to
// other workers, and with none left it would leave them unpolled.
func (m Membership) Placeable() []string {
	if len(m.Cordoned) == 0 || m.CordonsSuspended() {
		return m.Nodes
	}
	out := make([]string, 0, len(m.Nodes))
	for _, id := range m.Nodes {
		if _, c := slices.BinarySearch(m.Cordoned, id); !c {
			out = append(out, id)
		}
	}
	return out
}

// CordonsSuspended reports whether every live node is cordoned: the
// cordons then count for nothing (Placeable, IsCordoned) until one is
// lifted, so that the sessions stay polled.
func (m Membership) CordonsSuspended() bool {
	return len(m.Nodes) > 0 && len(m.Cordoned) == len(m.Nodes)
}

// IsCordoned reports whether id is a cordoned live node whose cordon
// counts (not CordonsSuspended).
func (m Membership) IsCordoned(id string) bool {
	if m.CordonsSuspended() {
		return false
	}
	_, ok := slices.BinarySearch(m.Cordoned, id)
	return ok
}

// Contains reports whether id is among the live nodes.
func (m Membership) Contains(id string) bool {
	_, ok := slices.BinarySearch(m.Nodes, id)
	return ok
}

// Len is the number of live nodes.
func (m Membership) Len() int { return len(m.Nodes) }

// NextExpiry is how long after the observation the earliest-expiring node
// drops out of Members unless it heartbeats again: its expiry minus
// ServerTimeMs, plus the one millisecond in which it still counts as live.
// It is false when there are no nodes. Measure it from when Members
// returned; the caller's own entry counts too, so a re-discovery scheduled
// by it may find nothing changed.
func (m Membership) NextExpiry() (time.Duration, bool) {
	if len(m.ExpiryMs) == 0 {
		return 0, false
	}
	d := time.Duration(slices.Min(m.ExpiryMs)-m.ServerTimeMs+1) * time.Millisecond
	return max(d, 0), true
}
