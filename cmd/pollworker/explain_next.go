package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/state"
)

// nextPollFacts is when a session's next poll is due, as far as Redis
// tells, and why.
type nextPollFacts struct {
	// DueInMs is how long from the server's now the next poll is due (0:
	// due now or overdue).
	DueInMs int64 `json:"due_in_ms"`
	// Why says what sets that time.
	Why string `json:"why"`
}

// readNextPoll reads what says when session id is polled next: the
// handoff mark of a session nobody holds, or the HTTP poller's saved
// backoff of a held one. nil when nothing says (a held session polled on
// its interval, or one the next holder polls at once).
func readNextPoll(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, id string, e explanation, now time.Time) (*nextPollFacts, error) {
	if e.Definition == nil || e.Definition.Paused {
		return nil, nil
	}
	interval := time.Duration(e.Definition.IntervalMs) * time.Millisecond
	if e.Lease == nil {
		mark, err := client.Get(ctx, keys.Released(id)).Result()
		if errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, nil // no mark, or a bad key (check reports it)
		}
		if err != nil {
			return nil, fmt.Errorf("read the handoff mark: %w", err)
		}
		return nextFromMark(mark, interval, now), nil
	}
	rec, err := state.NewStore(client, keys).Load(ctx, id)
	if err != nil || rec.Data == nil {
		return nil, nil // sessions get and check report a state that cannot be read
	}
	st, err := httppoll.DecodeState(rec.Data)
	if err != nil {
		return nil, nil
	}
	return nextFromBackoff(st, interval, now), nil
}

// nextFromMark reads a handoff mark ("<release ms>[:<next poll due ms>]"):
// the next holder keeps the due time, at most poller.FirstPollBound after
// it takes the lease.
func nextFromMark(mark string, interval time.Duration, now time.Time) *nextPollFacts {
	_, due, ok := strings.Cut(mark, ":")
	ms, err := strconv.ParseInt(due, 10, 64)
	if !ok || err != nil {
		return nil
	}
	in := min(max(time.UnixMilli(ms).Sub(now), 0), poller.FirstPollBound(interval))
	return &nextPollFacts{DueInMs: in.Milliseconds(),
		Why: "the next holder keeps the previous holder's schedule (its handoff mark), at most one interval ahead"}
}

// nextFromBackoff reads the HTTP poller's saved state: a session whose
// polls keep failing is polled its backoff later than its interval after
// its last poll.
func nextFromBackoff(st httppoll.State, interval time.Duration, now time.Time) *nextPollFacts {
	if st.Failures == 0 || st.Backoff() <= 0 || st.Polled.IsZero() {
		return nil
	}
	due := st.Polled.Add(interval + st.Backoff())
	return &nextPollFacts{DueInMs: max(due.Sub(now), 0).Milliseconds(),
		Why: fmt.Sprintf("backing off: %d polls failed in a row (last %s), so it waits %s more than its interval (--error-backoff); a new holder starts afresh",
			st.Failures, outcomeText(&st), shortDuration(st.Backoff()))}
}
