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
