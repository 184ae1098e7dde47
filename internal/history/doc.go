// Package history checks a recorded history of polls against the promise
// pollworker makes (every session polled, by one worker at a time, with
// fencing tokens that never go backwards), and replays the lease changes
// the workers reported. The integration tests and the demo record their
// histories differently (an HTTP target; a wrapper around the poller) and
// share these checks.
//
// It is pure: it reads the slices it is given and keeps nothing.
//
// # Guarantees
//
//   - Check's findings depend only on the polls and spans given, not on
//     their order.
//   - Overlaps are exact for the times recorded: two polls of a session
//     with different tokens overlap when one starts before the other ends.
//
// # Non-guarantees
//
//   - The checks are only as good as the recorder's clock: polls recorded
//     by different processes compare wall-clock times.
//   - Holders replays what the workers reported; a worker that holds a
//     lease without reporting it (or reports late) is not seen.
package history
