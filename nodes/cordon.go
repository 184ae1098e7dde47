package nodes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// ErrNotLive is returned by Cordon for an id that no live worker has.
var ErrNotLive = errors.New("nodes: no live worker has this id")

// ErrUnknown is returned by Forget for an id of which nothing is stored:
// no index entry, heartbeat key or cordon (a typo).
var ErrUnknown = errors.New("nodes: no worker of this id is known")

// ErrLive is returned by Forget for a worker that still heartbeats.
var ErrLive = errors.New("nodes: the worker still heartbeats")

// ErrNotJunk is returned by ForgetJunk for a valid worker id (Forget
// removes those) or a member the node index does not hold.
var ErrNotJunk = errors.New("nodes: not an invalid member of the node index")

// Cordon marks the live worker id cordoned: the planner then places no
// session on it, so it hands off what it holds (each poll in flight
// finishes first, as on SIGTERM) and takes nothing new, while it stays a
// member, heartbeats and serves its HTTP endpoints. It announces the change
// so that every worker plans again at once. A cordon outlives the worker's
// restarts until Uncordon or Forget.
func Cordon(ctx context.Context, c redis.Cmdable, keys keyspace.Space, id string) error {
	if err := keyspace.ValidateID(id); err != nil {
		return err
	}
	r, err := NewReader(c, keys, nil)
	if err != nil {
		return err
	}
	m, err := r.Members(ctx)
	if err != nil {
		return err
	}
	if !m.Contains(id) {
		return fmt.Errorf("%w: %q (live: %v)", ErrNotLive, id, m.Nodes)
	}
	if err := c.SAdd(ctx, keys.Cordoned(), id).Err(); err != nil {
		return fmt.Errorf("cordon %s: %w", id, err)
	}
	return Publish(ctx, c, keys, Event{Type: EventCordon, Node: id})
}

// Uncordon lets a cordoned worker take its share again, and announces it.
// It reports whether id was cordoned.
func Uncordon(ctx context.Context, c redis.Cmdable, keys keyspace.Space, id string) (bool, error) {
	if err := keyspace.ValidateID(id); err != nil {
		return false, err
	}
	n, err := c.SRem(ctx, keys.Cordoned(), id).Result()
	if err != nil {
		return false, fmt.Errorf("uncordon %s: %w", id, err)
	}
	return n > 0, Publish(ctx, c, keys, Event{Type: EventCordon, Node: id})
}

// Forget removes the membership entry of a worker that stopped
// heartbeating without leaving (a crash), before it would expire by
// itself, and its cordon; peers plan without it at once. It refuses with
// ErrLive while the worker's last heartbeat is younger than two heartbeat
// intervals (a third of its TTL each). The leases it held are not touched:
// they expire by their TTL.
func Forget(ctx context.Context, c redis.Cmdable, keys keyspace.Space, id string) error {
	if err := keyspace.ValidateID(id); err != nil {
		return err
	}
	r, err := NewReader(c, keys, nil)
	if err != nil {
		return err
	}
	infos, err := r.Get(ctx, id)
	if err != nil {
		return err
	}
	if len(infos) == 1 && infos[0].TTLMs > 0 {
		left, err := c.PTTL(ctx, keys.Node(id)).Result()
		if err != nil {
			return fmt.Errorf("forget %s: %w", id, err)
		}
		ttl := time.Duration(infos[0].TTLMs) * time.Millisecond
		if age := ttl - left; left > 0 && age < 2*ttl/3 {
			return fmt.Errorf("%w: %q heartbeat %v ago (every %v)", ErrLive, id, age.Round(time.Millisecond), ttl/3)
		}
	}
	var zrem, del, srem *redis.IntCmd
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		zrem = p.ZRem(ctx, keys.NodeIndex(), id)
		del = p.Del(ctx, keys.Node(id))
		srem = p.SRem(ctx, keys.Cordoned(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("forget %s: %w", id, err)
	}
	if zrem.Val()+del.Val()+srem.Val() == 0 {
		return fmt.Errorf("%w: %q", ErrUnknown, id)
	}
	return Publish(ctx, c, keys, Event{Type: EventLeave, Node: id})
}

// ForgetJunk removes member, an entry of the node index whose id is not a
// valid worker id (Membership.Junk: written by hand or by another
// program), from the index, and touches nothing else: no key is named
// after an invalid id. The workers already ignore it. It refuses with
// ErrNotJunk a valid id (Forget removes those, a junk one without a
// heartbeat key too) and a member the index does not hold.
func ForgetJunk(ctx context.Context, c redis.Cmdable, keys keyspace.Space, member string) error {
	if keyspace.ValidateID(member) == nil {
		return fmt.Errorf("%w: %q is a valid worker id", ErrNotJunk, member)
	}
	n, err := c.ZRem(ctx, keys.NodeIndex(), member).Result()
	if err != nil {
		return fmt.Errorf("forget %.64q: %w", member, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %.64q is not in the node index", ErrNotJunk, member)
	}
	return nil
}
