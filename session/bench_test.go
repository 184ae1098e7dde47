package session

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// seed stores n valid sessions directly and returns their sorted ids.
func seed(t testing.TB, c redis.UniversalClient, n int) []string {
	t.Helper()
	ctx := ctxT(t)
	ids := make([]string, n)
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range ids {
			ids[i] = fmt.Sprintf("s%06d", i)
			b, err := Encode(sess(ids[i]))
			if err != nil {
				return err
			}
			p.Set(ctx, keys.Session(ids[i]), b, 0)
			p.SAdd(ctx, keys.SessionBucketOf(ids[i]), ids[i])
		}
		return nil
	})
	require.NoError(t, err)
	return ids
}

func BenchmarkLoad(b *testing.B) {
	const n = 10_000
	_, c, s := newMini(b)
	seed(b, c, n)
	ctx := ctxT(b)
	b.ReportAllocs()
	for b.Loop() {
		snap, err := s.Load(ctx)
		if err != nil || len(snap.Sessions) != n {
			b.Fatalf("load: %d sessions, %v", len(snap.Sessions), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/session")
}

// BenchmarkFetch reads and decodes n definitions: a worker's load of its
// buckets.
func BenchmarkFetch(b *testing.B) {
	const n = 10_000
	_, c, s := newMini(b)
	ids := seed(b, c, n)
	ctx := ctxT(b)
	b.ReportAllocs()
	for b.Loop() {
		got, _, err := s.Fetch(ctx, ids)
		if err != nil || len(got) != n {
			b.Fatalf("fetch: %d sessions, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/session")
}

// BenchmarkChangesNone is a steady worker's per-round session check:
// nothing changed since the revision it has seen.
func BenchmarkChangesNone(b *testing.B) {
	_, _, s := newMini(b)
	ctx := ctxT(b)
	if err := s.PutMany(ctx, []Session{sess("a"), sess("b")}); err != nil {
		b.Fatal(err)
	}
	rev, _, err := s.Sizes(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		changed, _, _, err := s.Changes(ctx, rev)
		if err != nil || len(changed) != 0 {
			b.Fatalf("changes: %v, %v", changed, err)
		}
	}
}
