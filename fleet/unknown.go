package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// scanCount is the COUNT of each SCAN step that looks for lease keys.
const scanCount = 1000

// UnknownLeases are lease keys whose session is not in the store (removed
// while its holder was down, or written by hand).
type UnknownLeases struct {
	// Scanned is false when the SCAN was refused; Count is then 0.
	Scanned bool
	// Skipped says why the SCAN did not run.
	Skipped string
	// At is when the SCAN ran (local clock).
	At time.Time
	// Count is how many such leases are held.
	Count int
	// Sample are the first of them, by session id (at most the number
	// asked for).
	Sample []UnknownLease
}

// UnknownLease is one lease of a session not in the store.
type UnknownLease struct {
	Session, Holder, Incarnation string
	// Remaining is the lease's TTL, -1 without one.
	Remaining time.Duration
}

// UnknownLeases SCANs (keyspace.Space.LeaseMatch, on every master of a
// Cluster) for lease keys whose session known does not report, and reads
// their holders, keeping a sample of at most sampleMax. There is no index
// of leases to read instead: this is a pass over the whole keyspace, for
// one-shot commands (and the status page, at most once a minute). A SCAN
// the Redis user may not run is reported as skipped, not as an error.
func (r *Reader) UnknownLeases(ctx context.Context, known func(id string) bool, sampleMax int) (UnknownLeases, error) {
	var ids []string
	scanOne := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, r.keys.LeaseMatch(), scanCount).Iterator()
		for iter.Next(ctx) {
			id, ok := r.keys.LeaseSession(iter.Val())
			if ok && !known(id) && keyspace.ValidateID(id) == nil {
				ids = append(ids, id)
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster calls concurrently: one scan at a time
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scanOne(ctx, c)
		})
	} else {
		err = scanOne(ctx, r.client)
	}
	if redis.HasErrorPrefix(err, "NOPERM") {
		// The least-privilege ACL lets workers work, not scan.
		return UnknownLeases{Skipped: "this Redis user may not run SCAN"}, nil
	}
	if err != nil {
		return UnknownLeases{}, fmt.Errorf("fleet: scan for leases: %w", err)
	}
	out := UnknownLeases{Scanned: true, At: time.Now().UTC()}
	if len(ids) == 0 {
		return out, nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	holdings, err := r.leases.Inspect(ctx, ids)
	if err != nil {
		return UnknownLeases{}, fmt.Errorf("fleet: %w", err)
	}
	for _, h := range holdings {
		if h.Owner == "" {
			continue // expired since the SCAN
		}
		out.Count++
		if len(out.Sample) < sampleMax {
			o := lease.ParseOwner(h.Owner)
			out.Sample = append(out.Sample, UnknownLease{Session: h.Session, Holder: o.Holder, Incarnation: o.Incarnation, Remaining: h.Remaining})
		}
	}
	return out, nil
}
