// Package fleet is pollworker's one model of the fleet as a whole: where
// the sessions should go, and, for the commands that look at a running
// deployment, why they are where they are.
//
// Placement (placement.go) is written here once: the placeable members
// that read the same session namespace (ReadingSessions) weighed by their
// heartbeats (WeighMembers), the parsed session Selector,
// and a Planner that plans the default placement space and each
// selector's space among the members that match it (Place), with package
// assign as the policy. The workers (package poller), `pollworker status`,
// `explain`, `check` and the demo all plan through it, so what the
// commands report is what the workers do. Placement is pure: no Redis, no
// clock, no goroutines.
//
// The read model (snapshot.go) is a Snapshot that a Reader reads from
// Redis in a bounded number of round trips, whatever the number of
// sessions: the live members and their heartbeat infos, the bucket sizes
// and loads, and for the sessions asked about their definitions, leases,
// fencing counters, handoff marks, saved backoffs and the loss markers of
// their slots (key formats from package keyspace, value formats decoded by
// package lease). On a Snapshot, pure methods answer the questions the
// commands ask: OwnerOf and Placeable/Unplaceable (model.go), Explain
// (explain.go: why a session is where it is, or why nobody polls it:
// unplaceable, cordoned, quarantined, backed off, held by a worker that
// is not live or by its previous incarnation, ...) and Check (check.go:
// the invariants `pollworker check` reports). Build makes a Snapshot from
// given facts, so that all of these are table-tested without Redis.
//
// It writes nothing (reading the membership prunes expired members from
// the node index, as every worker does).
package fleet
