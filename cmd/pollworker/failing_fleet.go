package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// fleetFailing is what a worker keeps under keyspace.Space.Failing: the
// first pageFailingMax of its failing sessions and how many there are.
type fleetFailing struct {
	Total    int              `json:"n"`
	Sessions []failingSession `json:"s"`
}

// publishFailing adds to pipe the write of list, this worker's failing
// sessions, under key for ttl (with its timeline: timeline.Writer.Also).
func publishFailing(ctx context.Context, pipe redis.Pipeliner, key string, list []failingSession, ttl time.Duration) {
	out := fleetFailing{Total: len(list), Sessions: list[:min(len(list), pageFailingMax)]}
	b, err := json.Marshal(out)
	if err != nil {
		return // a struct of strings, numbers and times always marshals
	}
	pipe.Set(ctx, key, b, ttl)
}

// readFleetFailing reads the failing sessions the workers ids keep
// (publishFailing), in one pipeline: every worker's, longest failing
// first, each with its worker, and how many there are in all. A value that
// does not decode, or a key of another type, is skipped and counted in
// skipped, never deleted.
func readFleetFailing(ctx context.Context, client redis.Cmdable, keys keyspace.Space, ids []string) (rows []failingSession, total, skipped int, err error) {
	pipe := client.Pipeline()
	cmds := make(map[string]*redis.StringCmd, len(ids))
	for _, id := range ids {
		cmds[id] = pipe.Get(ctx, keys.Failing(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
		return nil, 0, 0, fmt.Errorf("read failing sessions: %w", err)
	}
	for id, cmd := range cmds {
		raw, err := cmd.Bytes()
		var ff fleetFailing
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil || json.Unmarshal(raw, &ff) != nil:
			skipped++
			continue
		}
		total += ff.Total
		for _, s := range ff.Sessions {
			s.Worker = id
			rows = append(rows, s)
		}
	}
	slices.SortFunc(rows, byFailingSince)
	return rows, total, skipped, nil
}

// byFailingSince orders failing sessions longest failing first, then by
// worker and session.
func byFailingSince(a, b failingSession) int {
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	if c := strings.Compare(a.Worker, b.Worker); c != 0 {
		return c
	}
	return strings.Compare(a.Session, b.Session)
}

// isWrongType reports whether err is Redis' WRONGTYPE error.
func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}
