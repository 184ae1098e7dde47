package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// Candidate is a live candidate of a role.
type Candidate struct {
	// ID is the candidate id.
	ID string
	// Priority is the candidate's Config.Priority.
	Priority int
}

// roster reads and writes the candidate records of one role; its keys
// (keyspace Candidates, Candidate, Successor) share the role lease's slot.
type roster struct {
	client         Client
	ttl            time.Duration
	keys           keyspace.Space
	session        string // the role's lease session, "election:<role>"
	clearSuccessor *redis.Script
}

func newRoster(client Client, keys keyspace.Space, role string, ttl time.Duration) *roster {
	return &roster{
		client:         client,
		ttl:            ttl,
		keys:           keys,
		session:        sessionOf(role),
		clearSuccessor: redis.NewScript(lua.ElectionClearSuccessor),
	}
}

// index is the hash of the candidates: id -> priority.
func (r *roster) index() string { return r.keys.Candidates(r.session) }

// alive is the key that is live (PX TTL) while candidate id heartbeats.
func (r *roster) alive(id string) string { return r.keys.Candidate(r.session, id) }

// successor holds the preferred successor, "<id>#<random>".
func (r *roster) successor() string { return r.keys.Successor(r.session) }

// register records id as live for one TTL with its priority.
func (r *roster) register(ctx context.Context, id string, priority int) error {
	prio := strconv.Itoa(priority)
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.alive(id), prio, r.ttl)
		p.HSet(ctx, r.index(), id, prio)
		return nil
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", id, err)
	}
	return nil
}

// leave removes id from the candidates.
func (r *roster) leave(ctx context.Context, id string) error {
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.alive(id))
		p.HDel(ctx, r.index(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("leave %s: %w", id, err)
	}
	return nil
}

// live returns the live candidates, highest priority first (ties by id),
// and prunes the index of expired ones.
func (r *roster) live(ctx context.Context) ([]Candidate, error) {
	ids, err := r.client.HKeys(ctx, r.index()).Result()
	if err != nil {
		return nil, fmt.Errorf("candidates: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.alive(id)
	}
	vals, err := r.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("candidates: %w", err)
	}
	var out []Candidate
	var dead []string
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			dead = append(dead, ids[i])
			continue
		}
		prio, _ := strconv.Atoi(s)
		out = append(out, Candidate{ID: ids[i], Priority: prio})
	}
	if len(dead) > 0 {
		// Best effort: a candidate that re-registers meanwhile writes its
		// field again at its next heartbeat.
		_ = r.client.HDel(ctx, r.index(), dead...).Err()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Priority != out[j].Priority {
			return out[i].Priority > out[j].Priority
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// isLive reports whether id is a live candidate.
func (r *roster) isLive(ctx context.Context, id string) (bool, error) {
	n, err := r.client.Exists(ctx, r.alive(id)).Result()
	if err != nil {
		return false, fmt.Errorf("candidate %s: %w", id, err)
	}
	return n == 1, nil
}

// preferred returns the recorded successor id, "" when none, and the whole
// recorded value, which differs between two preferences for the same id.
func (r *roster) preferred(ctx context.Context) (id, value string, err error) {
	v, err := r.client.Get(ctx, r.successor()).Result()
	if errors.Is(err, redis.Nil) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("successor: %w", err)
	}
	id, _, _ = strings.Cut(v, "#")
	return id, v, nil
}

// prefer records id as the preferred successor for one TTL, as id#<random>.
func (r *roster) prefer(ctx context.Context, id string) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	if err := r.client.Set(ctx, r.successor(), id+"#"+hex.EncodeToString(b[:]), r.ttl).Err(); err != nil {
		return fmt.Errorf("prefer %s: %w", id, err)
	}
	return nil
}

// honoured drops the successor preference if it names id.
func (r *roster) honoured(ctx context.Context, id string) error {
	if err := r.clearSuccessor.Run(ctx, r.client, []string{r.successor()}, id).Err(); err != nil {
		return fmt.Errorf("clear successor: %w", err)
	}
	return nil
}
