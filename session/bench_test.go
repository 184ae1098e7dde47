package session

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// wide is a session whose JSON has about 300 bytes, the size of a typical
// definition (a URL and a few labels).
func wide(id string) Session {
	s := sess(id)
	s.URL = "https://devices.example.com/api/v2/status/" + id + "?fields=health,latency,version"
	s.Labels = map[string]string{"team": "field-ops", "region": "eu-west-1", "site": "plant-0042",
		"device": "controller-" + id, "owner": "oncall@example.com", "tier": "gold"}
	return s
}

// seed stores n valid sessions (wide ones) directly and returns their
// sorted ids.
func seed(t testing.TB, c redis.UniversalClient, n int) []string {
	t.Helper()
	ctx := ctxT(t)
	ids := make([]string, n)
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range ids {
			ids[i] = fmt.Sprintf("s%06d", i)
			b, err := Encode(wide(ids[i]))
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

// BenchmarkFetch reads and decodes n definitions of about 300 bytes from a
// real redis-server (skipped without one): a worker's load of its buckets.
// Besides ns/session (the client's wall time) it reports the server's CPU
// per definition read (see reportServerCost), what bounds a fleet's cold
// start on one Redis:
//
//	go test -run '^$' -bench BenchmarkFetch ./session/
func BenchmarkFetch(b *testing.B) {
	const n = 10_000
	c := redistest.Start(b).Client(b)
	s := newStore(b, c)
	ids := seed(b, c, n)
	ctx := context.Background()
	before := readServerCost(b, c)
	b.ReportAllocs()
	for b.Loop() {
		got, _, err := s.Fetch(ctx, ids)
		if err != nil || len(got) != n {
			b.Fatalf("fetch: %d sessions, %v", len(got), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/session")
	reportServerCost(b, c, before, b.N*n)
}

// BenchmarkReadValues compares, on a real redis-server, ways of reading n
// values of about 300 bytes in calls of 256 keys (one round trip each), by
// the server's CPU per key (see reportServerCost):
//
//	go test -run '^$' -bench BenchmarkReadValues -count 10 ./session/
//
// pipeline-getrange is what Fetch sends. script-getrange is one read-only
// script per call with the same answers (value, nil when missing, 0 for
// another type). mget and script-mget-cut are for reference: MGET reads
// whole values (script-mget-cut into the script's memory, cutting only its
// reply) and answers nil for a key of another type.
func BenchmarkReadValues(b *testing.B) {
	const n, per = 10_000, 256
	c := redistest.Start(b).Client(b)
	ctx := context.Background()
	all := make([]string, 0, n)
	for _, id := range seed(b, c, n) {
		all = append(all, keys.Session(id))
	}
	getrange := redis.NewScript(`local out = {}
for i = 1, #KEYS do
  local v = redis.pcall('GETRANGE', KEYS[i], 0, ARGV[1])
  if type(v) == 'table' then
    if not string.find(v.err, 'WRONGTYPE', 1, true) then return v end
    v = 0
  elseif v == '' and redis.call('EXISTS', KEYS[i]) == 0 then
    v = false
  end
  out[i] = v
end
return out`)
	mgetCut := redis.NewScript(`local v = redis.call('MGET', unpack(KEYS))
local last = tonumber(ARGV[1])
for i = 1, #v do
  if v[i] and #v[i] > last + 1 then v[i] = string.sub(v[i], 1, last + 1) end
end
return v`)
	for _, sc := range []*redis.Script{getrange, mgetCut} {
		require.NoError(b, sc.Load(ctx, c).Err())
	}
	script := func(sc *redis.Script) func([]string) (int, error) {
		return func(ks []string) (int, error) {
			v, err := sc.EvalSha(ctx, c, ks, MaxValueBytes).Slice()
			return len(v), err
		}
	}
	for _, m := range []struct {
		name string
		read func(ks []string) (int, error)
	}{
		{"pipeline-getrange", func(ks []string) (int, error) {
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range ks {
					p.GetRange(ctx, k, 0, MaxValueBytes)
				}
				return nil
			})
			return len(cmds), err
		}},
		{"script-getrange", script(getrange)},
		{"mget", func(ks []string) (int, error) {
			v, err := c.MGet(ctx, ks...).Result()
			return len(v), err
		}},
		{"script-mget-cut", script(mgetCut)},
	} {
		b.Run(m.name, func(b *testing.B) {
			before := readServerCost(b, c)
			for b.Loop() {
				for chunk := range slices.Chunk(all, per) {
					if got, err := m.read(chunk); err != nil || got != len(chunk) {
						b.Fatalf("read: %d values, %v", got, err)
					}
				}
			}
			reportServerCost(b, c, before, b.N*n)
		})
	}
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

// BenchmarkDecode times decoding and validating one stored definition of
// the shape the benchmarks store (a URL, an interval string, six labels).
func BenchmarkDecode(b *testing.B) {
	raw := []byte(`{"id":"session-42","url":"http://127.0.0.1:8080/poll/session-42","interval":"30s",` +
		`"labels":{"env":"bench","tier":"a","zone":"z1","team":"poll","region":"eu","owner":"ops"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("session-42", raw); err != nil {
			b.Fatal(err)
		}
	}
}
