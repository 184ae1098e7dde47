package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// SequentialIDs returns n ids "session-0" … "session-<n-1>".
func SequentialIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("session-%d", i)
	}
	return ids
}

// UUIDs returns n random version-4 UUID strings.
func UUIDs(n int) []string {
	ids := make([]string, n)
	b := make([]byte, 16*n)
	_, _ = rand.Read(b)
	for i := range ids {
		u := b[16*i : 16*i+16]
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		ids[i] = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	}
	return ids
}

// Seed writes the sessions ids with the given interval with
// session.Store.PutMany (pipelines of 1000, one recorded change).
func Seed(ctx context.Context, c redis.UniversalClient, keys keyspace.Space, ids []string, interval time.Duration) error {
	store, err := session.NewStore(c, keys, session.WithURLCheck(nil)) // bench:// targets: the bench's own pollers
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	sessions := make([]session.Session, len(ids))
	for i, id := range ids {
		sessions[i] = session.Session{ID: id, URL: "bench://" + id, Interval: session.Duration(interval)}
	}
	if err := store.PutMany(ctx, sessions); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}
