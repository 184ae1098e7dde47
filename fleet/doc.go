// Package fleet is pollworker's one model of the fleet as a whole: where
// the sessions should go, and (for the commands that look at a running
// deployment) why they are where they are.
//
// Placement (placement.go) is written here once: the placeable members
// weighed by their heartbeats (WeighMembers), the parsed session Selector,
// and a Planner that plans the default placement space and each
// selector's space among the members that match it (Place), with package
// assign as the policy. The workers (package poller), `pollworker status`,
// `explain`, `check` and the demo all plan through it, so what the
// commands report is what the workers do.
//
// Placement is pure: no Redis, no clock, no goroutines.
package fleet
