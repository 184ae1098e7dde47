package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// Poll loads.
//
// A session polled every second costs the fleet 86,400 times one polled
// daily, so balance weighs each placement unit by the polls per day of its
// sessions, not by their number. The writers keep those loads next to the
// bucket sizes, in keyspace.Space.SessionLoads, with the same change
// record: each write learns the value it replaces (SET … GET, GETDEL, or
// the read of a WATCH transaction) and records the difference of the two
// values' loads with its size change, in one script. Every write of a key
// thereby adds exactly the change it made, whatever writers race it.
//
// The unit is polls per day, ceil(24h / interval): MaxInterval is a day, so
// every valid session weighs at least 1 with no clamp, the rounding error is
// below one poll a day per session (1/86400 of a 1 s session), and integers
// keep HINCRBY exact (a million sessions at MinInterval sum to 8.6e12, far
// inside an int64 and a float64's exact range). A paused or malformed
// session weighs 0: nobody polls it.
//
// An index written before loads were kept has no complete loads hash
// (field "complete" unset): readers then fall back to the sizes (Weights.
// Plannable) until Store.RebuildLoads counts the definitions once
// (pollworker sessions reweigh, or sessions apply). A new index is complete
// from its first write (scripts/lua/session_changed.lua).

// PollsPerDay is the load of a session polled every d: ceil(24h / d), at
// least 1 (0 for d ≤ 0).
func PollsPerDay(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	const day = int64(24 * time.Hour)
	return int(max((day+int64(d)-1)/int64(d), 1))
}

// Load is the session's load in polls per day: 0 when paused, else
// PollsPerDay of its interval, or for a scheduled session its slots per
// day (rounded up, at least 1).
func (s Session) Load() int {
	if s.Paused {
		return 0
	}
	if s.Scheduled() {
		return scheduleLoad(s)
	}
	return PollsPerDay(s.Interval.D())
}

// Placement units.
//
// Sessions without a selector are placed by index bucket, as they always
// were; sessions with selector S are placed in a bucket space of their
// own, unit (S, b), among the workers whose labels match S only (see
// assign.NewFleetIn). A unit is named "b" or "b|S" (S canonical,
// nodes.CanonicalSelector): the field of the sizes and loads hashes and the
// member of the change record. The size of "b" is the number of ids in
// index bucket b (all selectors); the size of "b|S" the number of active
// sessions of bucket b with selector S, counted from their values like
// the loads.

// Unit is the name of the placement unit of bucket b without a selector.
func Unit(b int) string { return strconv.Itoa(b) }

// UnitOf is the name of the placement unit of bucket b and the canonical
// selector sel ("" for none).
func UnitOf(b int, sel string) string {
	if sel == "" {
		return Unit(b)
	}
	return strconv.Itoa(b) + "|" + sel
}

// ParseUnit splits a unit name into its bucket and selector; ok is false
// for a name Store does not write.
func ParseUnit(u string) (b int, sel string, ok bool) {
	num, sel, _ := strings.Cut(u, "|")
	b, err := strconv.Atoi(num)
	if err != nil || b < 0 || b >= keyspace.SessionBuckets || (strings.Contains(u, "|") && sel == "") {
		return 0, "", false
	}
	return b, sel, true
}

// valueLoad is the placement unit and load a stored value contributes:
// its unit and Load when it decodes (active: polled by someone), the
// bucket's unit and load 0 otherwise (missing, malformed: nobody polls it).
func valueLoad(id string, raw []byte, present bool) (unit string, load int, active bool) {
	unit = Unit(keyspace.BucketOf(id))
	if !present {
		return unit, 0, false
	}
	sess, err := Decode(id, raw)
	if err != nil {
		return unit, 0, false
	}
	u, l := valueLoadOf(sess)
	return u, l, !sess.Paused
}

// changeSet accumulates the size and load changes of placement units for
// one change record.
type changeSet map[string]*[2]int64

// add adds size and load changes to unit (a zero change still marks the
// unit changed).
func (c changeSet) add(unit string, size, load int64) {
	d, ok := c[unit]
	if !ok {
		d = new([2]int64)
		c[unit] = d
	}
	d[0] += size
	d[1] += load
}

// replaced records a session value replaced by another: the old value's
// load leaves its unit, the new one's joins its unit, and the index
// bucket's size changes by added.
func (c changeSet) replaced(id string, oldRaw []byte, oldPresent bool, newRaw []byte, newPresent bool, added int64) {
	c.add(Unit(keyspace.BucketOf(id)), added, 0)
	ou, ol, oa := valueLoad(id, oldRaw, oldPresent)
	nu, nl, na := valueLoad(id, newRaw, newPresent)
	c.add(ou, -selectorCount(ou, oa), -int64(ol))
	c.add(nu, selectorCount(nu, na), int64(nl))
}

// selectorCount is what an active session counts in the size of a
// selector's unit: 1; 0 in a bucket's unit (counted by SADD and SREM) or
// when not active.
func selectorCount(unit string, active bool) int64 {
	if active && strings.Contains(unit, "|") {
		return 1
	}
	return 0
}

// args flattens the set into the ARGV of session_changed.lua, by unit.
func (c changeSet) args() []any {
	units := slices.Sorted(maps.Keys(c))
	out := make([]any, 0, 3*len(units))
	for _, u := range units {
		out = append(out, u, c[u][0], c[u][1])
	}
	return out
}

// Weights is what the planner weighs the index with: the revision, the
// sizes and the loads of every index bucket.
type Weights struct {
	// Rev is the session revision read with them: the starting point for
	// Changes.
	Rev int64
	// Sizes are the session counts per bucket (keyspace.SessionBuckets).
	Sizes []int
	// Loads are the polls per day per bucket; meaningful only if Complete.
	Loads []int
	// Complete says the loads count every session (see RebuildLoads).
	Complete bool
	// Spaces are the units of the sessions with a selector, by canonical
	// selector: their active sessions and loads per bucket.
	Spaces map[string]*Space
}

// Space is the sizes (active sessions) and loads per bucket of one
// selector's units.
type Space struct {
	Sizes, Loads []int
}

// space returns the Space of sel, made on first use.
func (w *Weights) space(sel string) *Space {
	if w.Spaces == nil {
		w.Spaces = map[string]*Space{}
	}
	sp, ok := w.Spaces[sel]
	if !ok {
		sp = &Space{Sizes: make([]int, keyspace.SessionBuckets), Loads: make([]int, keyspace.SessionBuckets)}
		w.Spaces[sel] = sp
	}
	return sp
}

// Plannable is what to plan with: the loads when complete, else the sizes
// (an index written before loads were kept).
func (w Weights) Plannable() []int {
	if w.Complete {
		return w.Loads
	}
	return w.Sizes
}

// namedRecordKey is err, or for a WRONGTYPE reply the error that names the
// key of the change record of the wrong type and the fix.
func (s *Store) namedRecordKey(ctx context.Context, err error) error {
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		if terr := s.checkRecordTypes(ctx); terr != nil {
			return terr
		}
	}
	return err
}

// Weights reads the revision, the sizes and the loads in one round trip.
func (s *Store) Weights(ctx context.Context) (Weights, error) {
	var cur *redis.StringCmd
	var sizes, loads *redis.MapStringStringCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		cur = p.Get(ctx, s.keys.SessionRev())
		sizes = p.HGetAll(ctx, s.keys.SessionSizes())
		loads = p.HGetAll(ctx, s.keys.SessionLoads())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Weights{}, fmt.Errorf("read session weights: %w", s.namedRecordKey(ctx, err))
	}
	rev, err := cur.Int64()
	if errors.Is(err, redis.Nil) {
		rev, err = 0, nil
	}
	if err != nil {
		return Weights{}, fmt.Errorf("read session revision: %w", err)
	}
	w := Weights{Rev: rev, Sizes: make([]int, keyspace.SessionBuckets), Loads: make([]int, keyspace.SessionBuckets)}
	for k, v := range sizes.Val() {
		if b, sel, ok := ParseUnit(k); ok && sel == "" {
			w.Sizes[b] = sizeOf(v)
		} else if ok {
			w.space(sel).Sizes[b] = sizeOf(v)
		}
	}
	for k, v := range loads.Val() {
		if k == "complete" {
			w.Complete = v == "1"
			continue
		}
		if b, sel, ok := ParseUnit(k); ok && sel == "" {
			w.Loads[b] = sizeOf(v)
		} else if ok {
			w.space(sel).Loads[b] = sizeOf(v)
		}
	}
	return w, nil
}

// maxRebuildTries bounds the attempts of RebuildLoads.
const maxRebuildTries = 5

// ErrBusy is returned (wrapped) by RebuildLoads when writes kept moving
// the revision while it counted.
var ErrBusy = errors.New("session: the index kept changing")

// RebuildLoads counts the load of every session from its definition and
// replaces the loads hash with the counts, marked complete, and the sizes
// hash with the sizes of the index sets (SCARD): the repair of an index
// written before loads were kept (or by a writer that did not keep them),
// or whose sizes a Cluster master that lost its data left wrong. It reads every session (Load) and writes only if no write
// was recorded meanwhile, retrying a few times; ErrBusy otherwise. A write
// whose data landed before the read and whose change record after it
// counts twice in its unit: run it while writers are quiet, or again. It
// returns the total load written.
func (s *Store) RebuildLoads(ctx context.Context) (int64, error) {
	keys := []string{s.keys.SessionRev(), s.keys.SessionChanges(), s.keys.SessionLoads(), s.keys.SessionSizes()}
	for range maxRebuildTries {
		snap, err := s.Load(ctx)
		if err != nil {
			return 0, fmt.Errorf("rebuild loads: %w", err)
		}
		cs := make(changeSet)
		for _, sess := range snap.Sessions {
			u, l := valueLoadOf(sess)
			cs.add(u, selectorCount(u, !sess.Paused), int64(l))
		}
		// A bucket's size is its index set's (ids of every kind): counted
		// after the revision was read, so a write meanwhile moves the
		// revision and this round is retried.
		sizes, err := s.bucketSizes(ctx)
		if err != nil {
			return 0, fmt.Errorf("rebuild loads: %w", err)
		}
		for b, n := range sizes {
			if n > 0 {
				cs.add(Unit(b), n, 0)
			}
		}
		args := []any{snap.Rev}
		var total int64
		for _, u := range slices.Sorted(maps.Keys(cs)) {
			if d := cs[u]; d[0] != 0 || d[1] != 0 {
				args = append(args, u, d[0], d[1])
				total += d[1]
			}
		}
		rev, err := redis.NewScript(lua.SessionLoads).Run(ctx, s.client, keys, args...).Int64()
		if err != nil {
			return 0, fmt.Errorf("rebuild loads: %w", err)
		}
		if rev >= 0 {
			if err := s.client.Publish(ctx, s.keys.Events(), eventFor("")).Err(); err != nil {
				s.log.Warn("announce rebuilt loads", zap.Error(err))
			}
			return total, nil
		}
	}
	return 0, fmt.Errorf("rebuild loads: %w", ErrBusy)
}

// bucketSizes reads SCARD of every index bucket, in pipelines of
// PipelineLen.
func (s *Store) bucketSizes(ctx context.Context) ([]int64, error) {
	out := make([]int64, keyspace.SessionBuckets)
	for lo := 0; lo < keyspace.SessionBuckets; lo += PipelineLen {
		hi := min(lo+PipelineLen, keyspace.SessionBuckets)
		cmds := make([]*redis.IntCmd, hi-lo)
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for b := lo; b < hi; b++ {
				cmds[b-lo] = p.SCard(ctx, s.keys.SessionBucket(b))
			}
			return nil
		})
		for b := lo; b < hi; b++ {
			n, err := cmds[b-lo].Result()
			if err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") { // a bucket of the wrong type reads as empty (BucketIDs)
				return nil, fmt.Errorf("read bucket sizes: %w", err)
			}
			out[b] = n
		}
	}
	return out, nil
}

// valueLoadOf is the unit and load of a decoded session.
func valueLoadOf(sess Session) (unit string, load int) {
	return UnitOf(keyspace.BucketOf(sess.ID), sess.SelectorKey()), sess.Load()
}
