package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
)

// Reader reads the membership without being a member: for status pages,
// tools and the Registry itself. It writes nothing but the pruning of
// expired index entries that reading the members does for everyone. It is
// safe for concurrent use.
type Reader struct {
	client redis.Cmdable
	keys   keyspace.Space
	log    *zap.Logger
}

// NewReader returns a Reader of the members in keys; logger may be nil.
func NewReader(client redis.Cmdable, keys keyspace.Space, logger *zap.Logger) (*Reader, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrInvalidConfig)
	}
	if err := keys.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Keys: %w", ErrInvalidConfig, err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Reader{client: client, keys: keys, log: logger}, nil
}

// Members returns the live members (it writes nothing: the heartbeats
// prune the expired ones): one script
// call on the node index, then one pipeline of GETs of the heartbeat keys
// of the entries with a valid id (an entry is a live worker only with its
// own info there; the others are in Junk). Its Version is 0: only a Registry, which
// reads in one loop, numbers its observations.
func (r *Reader) Members(ctx context.Context) (Membership, error) {
	var members *redis.Cmd
	var cordoned *redis.StringSliceCmd
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		members = membersScript.EvalSha(ctx, p, []string{r.keys.NodeIndex()})
		cordoned = p.SMembers(ctx, r.keys.Cordoned())
		return nil
	})
	if err != nil && redis.HasErrorPrefix(members.Err(), "NOSCRIPT") {
		members = membersScript.Run(ctx, r.client, []string{r.keys.NodeIndex()})
		err = members.Err()
		if err == nil {
			err = cordoned.Err()
		}
	}
	if err != nil {
		if cordoned.Err() != nil && members.Err() == nil {
			return Membership{}, fmt.Errorf("members: %w", wrongTypeOf(cordoned.Err(), r.keys.Cordoned()))
		}
		return Membership{}, fmt.Errorf("members: %w", wrongTypeOf(err, r.keys.NodeIndex()))
	}
	reply, err := members.Slice()
	if err != nil {
		return Membership{}, fmt.Errorf("members: %w", err)
	}
	m, err := parseMembers(reply)
	if err != nil {
		return Membership{}, fmt.Errorf("members: %w", err)
	}
	if m, err = r.dropJunk(ctx, m); err != nil {
		return Membership{}, fmt.Errorf("members: %w", err)
	}
	// Only live nodes count as cordoned: an entry of a worker that has
	// gone is ignored (pollworker forget removes it).
	for _, id := range cordoned.Val() {
		if m.Contains(id) {
			m.Cordoned = append(m.Cordoned, id)
		}
	}
	slices.Sort(m.Cordoned)
	return m, nil
}

// keylessGrace is how long before its index entry expires a valid
// worker's entry may lack its heartbeat key and still count as live. A
// heartbeat sets the key (PX ttl) and then the entry (now + ttl) in two
// round trips, so the key of a worker whose next heartbeat is late expires
// a round trip before its entry; reading that moment as "not live" moved
// sessions between live workers (TestThreeWorkersConvergeAndHandOff failed
// in 2 of 3 runs under -race). An entry written by hand with no key and a
// later expiry (ZADD now+1h ghost) is still junk; one that expires within
// the grace takes part for at most that long.
const keylessGrace = 2 * time.Second

// dropJunk moves the entries of m that are not live workers to m.Junk:
// those whose id is invalid, and those whose heartbeat key holds no info
// of theirs (heartbeatProblem; read with one pipeline of GETs). A failed
// read fails it: no entry is guessed live or dead.
func (r *Reader) dropJunk(ctx context.Context, m Membership) (Membership, error) {
	valid := make([]int, 0, len(m.Nodes))
	for i, id := range m.Nodes {
		if err := keyspace.ValidateID(id); err != nil {
			reason := err.Error()
			if ie := (*keyspace.IDError)(nil); errors.As(err, &ie) {
				reason = ie.Reason
			}
			m.Junk = append(m.Junk, Junk{Member: id, Problem: "not a valid worker id: " + reason})
			continue
		}
		valid = append(valid, i)
	}
	infos := make([]*redis.StringCmd, len(valid))
	if len(valid) > 0 {
		// Errors are read per command: a key of the wrong type is one
		// entry's problem, not the read's.
		_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k, i := range valid {
				infos[k] = p.Get(ctx, r.keys.Node(m.Nodes[i]))
			}
			return nil
		})
	}
	nodes, expiry := make([]string, 0, len(valid)), make([]int64, 0, len(valid))
	for k, i := range valid {
		id := m.Nodes[i]
		problem, err := r.heartbeatProblem(id, infos[k], m.ExpiryMs[i]-m.ServerTimeMs)
		if err != nil {
			return Membership{}, fmt.Errorf("heartbeat keys: %w", err)
		}
		if problem != "" {
			m.Junk = append(m.Junk, Junk{Member: id, Problem: problem})
			continue
		}
		nodes, expiry = append(nodes, id), append(expiry, m.ExpiryMs[i])
	}
	m.Nodes, m.ExpiryMs = nodes, expiry
	slices.SortFunc(m.Junk, func(a, b Junk) int { return strings.Compare(a.Member, b.Member) })
	return m, nil
}

// heartbeatWrongType ends the Junk.Problem of a heartbeat key of the
// wrong type.
const heartbeatWrongType = " is not a string"

// heartbeatProblem says why the entry of worker id, which expires in
// expiresIn ms, is not a live worker, from the GET of its heartbeat key:
// no key (past keylessGrace), a key of the wrong type, or a value that is
// not the Info of id (every worker writes its own: an entry written by
// hand with a key of garbage, or "{}", took sessions it never polled);
// "" for a live worker. err is a read that failed.
func (r *Reader) heartbeatProblem(id string, get *redis.StringCmd, expiresIn int64) (problem string, err error) {
	key := r.keys.Node(id)
	value, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		if expiresIn > keylessGrace.Milliseconds() {
			return "no heartbeat key " + key, nil
		}
		return "", nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return "heartbeat key " + key + heartbeatWrongType, nil
	case err != nil:
		return "", err
	}
	var info Info
	if err := json.Unmarshal([]byte(value), &info); err != nil {
		return "heartbeat key " + key + " holds no worker info (malformed JSON)", nil
	}
	if info.ID != id {
		return fmt.Sprintf("heartbeat key %s holds the info of %.64q, not of this worker", key, info.ID), nil
	}
	return "", nil
}

// Get reads the Info of the given nodes with pipelined GETs, in the order
// given. Nodes whose Info is missing (expired or never written) or malformed
// are skipped, not an error.
func (r *Reader) Get(ctx context.Context, ids ...string) ([]Info, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(ids))
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, r.keys.Node(id))
		}
		return nil
	})
	infos := make([]Info, 0, len(ids))
	for i, cmd := range cmds {
		value, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			// One worker's key, not the fleet's: read the others (the
			// worker itself cannot heartbeat, and leaves).
			r.log.Warn("skipping node info of the wrong type; pollworker never deletes it: delete or rename the key",
				zap.String("peer", ids[i]), zap.String("key", r.keys.Node(ids[i])))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get node %s: %w", ids[i], err)
		}
		var info Info
		if err := json.Unmarshal([]byte(value), &info); err != nil {
			r.log.Warn("skipping malformed node info", zap.String("peer", ids[i]), zap.Error(err))
			continue
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// ErrWrongType is a fleet key (the node index, the cordon set, a
// heartbeat key) of the wrong type, written around pollworker: errors.Is
// tells it from Redis being unreachable.
var ErrWrongType = errors.New("nodes: a key of the wrong type")

// wrongType is an error carrying Redis' WRONGTYPE: it is ErrWrongType.
type wrongType struct{ err error }

func (w wrongType) Error() string        { return w.err.Error() }
func (w wrongType) Unwrap() error        { return w.err }
func (w wrongType) Is(target error) bool { return target == ErrWrongType }

// wrongTypeOf names key in an error that carries Redis' WRONGTYPE (a
// script's does not say which key; miniredis wraps it in another
// error), which is then ErrWrongType, and returns other errors as they
// are.
func wrongTypeOf(err error, key string) error {
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		return err
	}
	return fmt.Errorf("key %s has the wrong type (pollworker never deletes it: delete or rename it): %w", key, wrongType{err})
}
