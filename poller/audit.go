package poller

import (
	"slices"
	"time"

	"github.com/pollworker/pollworker/keyspace"
)

// auditPeriod is how long it takes at most for every bucket a worker reads
// (assigned here, or holding a session polled here) to be read again in
// full rounds, a share each round, although the change record says
// nothing changed: a session key written around the session store
// (redis-cli DEL or SET), which records no change, is then seen within
// this time: its polls stop, or follow the new definition. Changes made
// with the store (the CLI, the library) are seen in the next round.
const auditPeriod = 2 * time.Minute

// audit is the share of buckets a full round reads again (view.auditShare).
type audit struct {
	rounds int // full rounds per auditPeriod: at least 1 (0: no audit)
	next   int // the bucket number the next share starts from
}

// newAudit returns the audit that reads every bucket again within period
// when full rounds come every discovery.
func newAudit(period, discovery time.Duration) audit {
	if period < 0 {
		return audit{} // none (tests)
	}
	return audit{rounds: max(1, int(period/max(discovery, time.Millisecond)))}
}

// auditShare marks the next share of the buckets this worker reads to be
// read again this round (assigned ones: loadBuckets; those of sessions
// held outside them: recheckHeld).
func (v *view) auditShare() {
	if v.audit.rounds == 0 {
		return
	}
	var bs []int
	for b, st := range v.buckets {
		if st.assigned && st.loaded {
			bs = append(bs, b)
		}
	}
	for id := range v.held {
		if b := keyspace.BucketOf(id); !v.assignedBucket(b) {
			bs = append(bs, b)
		}
	}
	slices.Sort(bs)
	var share []int
	share, v.audit.next = auditPick(slices.Compact(bs), v.audit.next, v.audit.rounds)
	for _, b := range share {
		if st, ok := v.buckets[b]; ok && st.assigned {
			st.loaded = false
			continue
		}
		v.staleHeld[b] = struct{}{}
	}
}

// assignedBucket reports whether bucket b is assigned here.
func (v *view) assignedBucket(b int) bool {
	st, ok := v.buckets[b]
	return ok && st.assigned
}

// auditPick returns the share of buckets (sorted, distinct) a round reads
// again when every one is read once in rounds rounds: the
// ceil(len/rounds) buckets from the first at or after from, wrapping
// around; and where the next share starts.
func auditPick(buckets []int, from, rounds int) (share []int, next int) {
	if len(buckets) == 0 {
		return nil, 0
	}
	n := (len(buckets) + rounds - 1) / rounds
	i, _ := slices.BinarySearch(buckets, from)
	for k := range n {
		share = append(share, buckets[(i+k)%len(buckets)])
	}
	return share, share[len(share)-1] + 1
}
