// Package lua embeds pollworker's Redis Lua scripts. Each .lua file starts
// with a header naming its KEYS, ARGV and reply. Callers wrap the sources in
// redis.NewScript and call Run or EvalSha, which reloads on NOSCRIPT.
package lua

import _ "embed"

// Acquire takes leases (SET NX PX) and bumps their fencing counters; a retry
// with the same owner value is recognised as success. A fresh acquisition
// consumes the session's handoff mark and reports the time since the release.
//
//go:embed acquire.lua
var Acquire string

// Fresh writes a missing loss marker without a quarantine: the keyspace is
// declared fresh (lease.MarkFresh).
//
//go:embed fresh.lua
var Fresh string

// Renew extends leases only where GET equals the owner value (PEXPIRE), and
// returns the positions of those it did not extend.
//
//go:embed renew.lua
var Renew string

// Release deletes leases only where GET equals the owner value, and marks
// the release time for the successor (the handoff gap).
//
//go:embed release.lua
var Release string

// Inspect returns the owner value and PTTL of leases, read-only.
//
//go:embed inspect.lua
var Inspect string

// Unheld returns the positions of the lease keys that do not exist,
// read-only: the cheap question an orphan watch asks of many leases.
//
//go:embed unheld.lua
var Unheld string

// sessionRev is the prelude of the scripts that bump the session revision:
// a missing counter starts at Redis' clock and records its start.
//
//go:embed session_rev.lua
var sessionRev string

//go:embed session_changed.lua
var sessionChanged string

// SessionChanged increments the session revision and records it as the
// last change of some placement units, with their size and load changes.
var SessionChanged = sessionRev + sessionChanged

// SessionChanges reads, read-only, the current session revision and the
// placement units changed since a revision with their sizes and loads.
//
//go:embed session_changes.lua
var SessionChanges string

//go:embed session_loads.lua
var sessionLoads string

// SessionLoads replaces the loads hash with loads counted from the
// definitions, unless the session revision moved meanwhile.
var SessionLoads = sessionRev + sessionLoads

// NodeHeartbeat records a worker as live until the Redis server's time plus
// a TTL in the node index, pruning expired entries (package nodes).
//
//go:embed node_heartbeat.lua
var NodeHeartbeat string

// NodeMembers prunes the node index and returns the server time and the
// live workers with their expiries (package nodes).
//
//go:embed node_members.lua
var NodeMembers string

// NodeClaim claims a worker id for one process incarnation: sets the node
// info key only if it is absent or already this incarnation's (package
// nodes).
//
//go:embed node_claim.lua
var NodeClaim string

// NodeUnclaim deletes the node info key only if it holds this
// incarnation's value (package nodes).
//
//go:embed node_unclaim.lua
var NodeUnclaim string

// NodeLeave removes a worker from the node index unless a later
// incarnation of its id wrote a later expiry (package nodes).
//
//go:embed node_leave.lua
var NodeLeave string

// NodeHolder returns the node info value, its PTTL and the server time,
// read-only (package nodes).
//
//go:embed node_holder.lua
var NodeHolder string

// ElectionClearSuccessor drops an election's successor preference once the
// candidate it names has become leader (package election).
//
//go:embed election_clear_successor.lua
var ElectionClearSuccessor string

// StateSlot records a scheduled session's last slot started or finished in
// its state hash, fenced by the lease (slot fields only; the poller's data
// is left alone).
//
//go:embed state_slot.lua
var StateSlot string

// StateCut marks that a scheduled session's recorded slots do not carry
// over (removed, paused, resumed, schedule changed), where it has any.
//
//go:embed state_cut.lua
var StateCut string
