package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// MarkFresh declares that no lease was ever granted in the keyspace keys on
// this Redis: a new deployment, or a test's or demo's own server. It writes
// the loss markers that are missing without a quarantine, so that the first
// acquisitions do not wait Config.LossQuarantine (from inside Redis a
// keyspace never used and one that lost its data look the same). Markers
// that exist are left alone. It reports how many it wrote. It checks
// nothing: InitKeyspace is the checked form, for operators.
//
// Never call it on a keyspace that may have lost data while workers ran:
// it would lift the loss quarantine, and a worker that held a lease before
// the loss could poll alongside a successor until its next renewal.
func MarkFresh(ctx context.Context, c Client, keys keyspace.Space) (int, error) {
	if err := keys.Validate(); err != nil {
		return 0, fmt.Errorf("mark fresh: %w", err)
	}
	script := redis.NewScript(lua.Fresh)
	slots := markerSlots(c)
	_, cluster := c.(*redis.ClusterClient)
	if err := script.Load(ctx, c).Err(); err != nil {
		return 0, fmt.Errorf("mark fresh: %w", err)
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(slots))
	for i, s := range slots {
		ks := []string{keys.Epoch(s)}
		if cluster {
			ks = append(ks, keys.EpochConfirmed(s))
		}
		cmds[i] = script.EvalSha(ctx, pipe, ks)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("mark fresh: %w", err)
	}
	n := 0
	for _, cmd := range cmds {
		if v, _ := cmd.Int(); v == 1 {
			n++
		}
	}
	return n, nil
}

// markerSlots are the hash slots with a loss marker: slot 0 outside
// Cluster, every slot under it.
func markerSlots(c any) []uint16 {
	if _, cluster := c.(*redis.ClusterClient); !cluster {
		return []uint16{0}
	}
	slots := make([]uint16, 16384)
	for i := range slots {
		slots[i] = uint16(i)
	}
	return slots
}

// DefaultInitScanLimit is the default scanLimit of InitKeyspace: the most
// keys one Redis server may hold for the check to read them all (SCAN
// reads about a thousand per round trip, a second or so per million on a
// local network).
const DefaultInitScanLimit = 1_000_000

// ErrInUse is returned (wrapped, in an *InUseError) by InitKeyspace for a
// keyspace that shows it was used: it holds leases, fencing counters,
// handoff marks, session states or workers.
var ErrInUse = errors.New("lease: keyspace in use")

// ErrTooLarge is returned (wrapped) by InitKeyspace when a Redis server
// holds more keys than its scanLimit.
var ErrTooLarge = errors.New("lease: too many keys to check")

// InUseError is what InitKeyspace found in a keyspace that was used.
type InUseError struct {
	// Members is the number of workers in the node index, live or not
	// yet pruned.
	Members int64
	// Leases, Fences, Marks, States, Heartbeats and HighWater count the
	// keys of each kind found: leases, fencing records (and counters of the
	// layout before them), handoff marks of that layout, session states,
	// worker heartbeats, token high-water marks (keyspace EpochTokens: a
	// lease was granted in the slot).
	Leases, Fences, Marks, States, Heartbeats, HighWater int
	// Example is one key found, to look at.
	Example string
}

// Error lists what was found.
func (e *InUseError) Error() string {
	var parts []string
	add := func(n int64, one, many string) {
		switch {
		case n == 1:
			parts = append(parts, "1 "+one)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	add(e.Members, "worker in the node index", "workers in the node index")
	add(int64(e.Leases), "lease", "leases")
	add(int64(e.Fences), "fencing record", "fencing records")
	add(int64(e.Marks), "handoff mark", "handoff marks")
	add(int64(e.States), "session state", "session states")
	add(int64(e.Heartbeats), "worker heartbeat", "worker heartbeats")
	add(int64(e.HighWater), "token high-water mark", "token high-water marks")
	msg := ErrInUse.Error() + ": " + strings.Join(parts, ", ")
	if e.Example != "" {
		msg += " (e.g. " + e.Example + ")"
	}
	return msg
}

// Unwrap returns ErrInUse.
func (e *InUseError) Unwrap() error { return ErrInUse }

// found reports whether anything was found.
func (e *InUseError) found() bool {
	return e.Members > 0 || e.Leases+e.Fences+e.Marks+e.States+e.Heartbeats+e.HighWater > 0
}

// InitResult is what InitKeyspace did.
type InitResult struct {
	// Written is the number of loss markers written: 0 when every one
	// existed already (the keyspace was initialised before, or workers
	// ran in it), and nothing was checked.
	Written int
	// Checked is the number of keys the check read (the servers' DBSIZE).
	Checked int64
}

// InitKeyspace declares a new keyspace fresh, as MarkFresh, after checking
// that it is: so that the first workers on a brand-new Redis or key prefix
// take their leases at once instead of waiting out the loss quarantine.
// A keyspace whose loss markers all exist is left alone (Written 0, no
// error): it was initialised before, or workers ran in it, so running
// InitKeyspace twice is harmless.
//
// Otherwise it refuses, with an *InUseError (ErrInUse), a keyspace that
// shows it was used: a member in the node index (one read, ZCARD), or a
// lease, fencing counter, handoff mark, session state or heartbeat key
// under the key prefix. From inside Redis only a scan can tell that no
// such key exists (fencing counters never expire, but nothing counts
// them), so it reads every key of each server with SCAN MATCH
// "<prefix>:*" (non-blocking, about a thousand keys per round trip),
// after checking that the server's DBSIZE is at most scanLimit: a huge
// shared Redis is refused with ErrTooLarge rather than scanned for
// minutes unasked (scanLimit 0 scans whatever the size). Session
// definitions and the session index do not count: sessions may be added
// before the first worker starts.
//
// Run it before the first worker starts. It cannot tell a keyspace that
// lost all its data (a restart without persistence) while workers ran
// from a new one if those workers have not written again yet: the node
// index catches them once they heartbeat (within a heartbeat interval),
// but do not run it right after a loss.
func InitKeyspace(ctx context.Context, c redis.UniversalClient, keys keyspace.Space, scanLimit int64) (InitResult, error) {
	if err := keys.Validate(); err != nil {
		return InitResult{}, fmt.Errorf("init keyspace: %w", err)
	}
	missing, err := missingMarkers(ctx, c, keys)
	if err != nil || missing == 0 {
		return InitResult{}, err
	}
	use, checked, err := findUse(ctx, c, keys, scanLimit)
	if err != nil {
		return InitResult{Checked: checked}, err
	}
	if use.found() {
		return InitResult{Checked: checked}, use
	}
	n, err := MarkFresh(ctx, c, keys)
	return InitResult{Written: n, Checked: checked}, err
}

// missingMarkers counts the loss markers that do not exist.
func missingMarkers(ctx context.Context, c redis.UniversalClient, keys keyspace.Space) (int, error) {
	slots := markerSlots(c)
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(slots))
	for i, s := range slots {
		cmds[i] = pipe.Exists(ctx, keys.Epoch(s))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("init keyspace: read the loss markers: %w", err)
	}
	n := 0
	for _, cmd := range cmds {
		if cmd.Val() == 0 {
			n++
		}
	}
	return n, nil
}

// findUse reads the node index and scans every server for the keys of
// keys' prefix that show use.
func findUse(ctx context.Context, c redis.UniversalClient, keys keyspace.Space, scanLimit int64) (*InUseError, int64, error) {
	use := &InUseError{}
	members, err := c.ZCard(ctx, keys.NodeIndex()).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("init keyspace: read the node index: %w", err)
	}
	use.Members = members
	kinds := []struct {
		prefix string
		n      *int
	}{
		{strings.TrimSuffix(keys.Lease(""), "{}"), &use.Leases},
		{strings.TrimSuffix(keys.Fencing(""), "{}"), &use.Fences},
		{strings.TrimSuffix(keys.Fence(""), "{}"), &use.Fences},
		{strings.TrimSuffix(keys.Released(""), "{}"), &use.Marks},
		{strings.TrimSuffix(keys.State(""), "{}"), &use.States},
		{keys.Node(""), &use.Heartbeats},
	}
	marker := keys.Epoch(0)
	epochPrefix := marker[:strings.IndexByte(marker, '{')]
	tokensSuffix := strings.TrimPrefix(keys.EpochTokens(0), marker)
	var mu sync.Mutex // ForEachMaster scans the masters at once
	var checked int64
	scan := func(ctx context.Context, server *redis.Client) error {
		size, err := server.DBSize(ctx).Result()
		if err != nil {
			return fmt.Errorf("init keyspace: DBSIZE: %w", err)
		}
		if scanLimit > 0 && size > scanLimit {
			return fmt.Errorf("init keyspace: %w: %s holds %d keys, more than the scan limit %d", ErrTooLarge, server.Options().Addr, size, scanLimit)
		}
		mu.Lock()
		checked += size
		mu.Unlock()
		iter := server.Scan(ctx, 0, strings.TrimSuffix(keys.NodeIndex(), "nodes")+"*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if strings.HasPrefix(key, epochPrefix) && strings.HasSuffix(key, tokensSuffix) {
				mu.Lock()
				use.HighWater++
				if use.Example == "" {
					use.Example = key
				}
				mu.Unlock()
			}
			for _, k := range kinds {
				if strings.HasPrefix(key, k.prefix) {
					mu.Lock()
					*k.n++
					if use.Example == "" {
						use.Example = key
					}
					mu.Unlock()
				}
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("init keyspace: SCAN: %w", err)
		}
		return nil
	}
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, cc)
	default:
		err = fmt.Errorf("init keyspace: %T is not a single server or a Cluster client", c)
	}
	return use, checked, err
}
