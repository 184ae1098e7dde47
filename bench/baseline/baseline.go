// Package baseline is THE BASELINE of the pollbench benchmark: a small,
// faithful implementation of the naive design that pollworker is measured
// against. It is not part of pollworker and must not be used to run
// anything but the benchmark.
//
// The naive design, as described in the design research:
//
//   - membership: each worker SETs poll:node:<id> with a TTL; every round
//     SCANs poll:node:* to find the live workers;
//   - sessions: every round SCANs session:* and reads every session (MGET
//     per SCAN page);
//   - ownership: rendezvous hashing over the live workers (package hrw, so
//     that only the Redis design differs);
//   - leases: one EVAL round trip per lease to acquire (SET NX PX plus INCR
//     of the fencing counter) and one EVAL round trip per lease per renewal;
//   - no push notification (no Pub/Sub): changes are seen at the next round;
//   - handoff only by TTL expiry: a worker that stops owning a session, or
//     shuts down, stops polling it and lets its lease expire.
//
// It keeps the pollworker key layout (keyspace.Space), so both designs run
// against the same seeded sessions.
package baseline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/hrw"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// acquireScript takes one lease: SET NX PX and INCR of its fencing counter.
// KEYS[1]=lease key, KEYS[2]=fence key; ARGV[1]=owner, ARGV[2]=ttl ms;
// returns the token, or 0 when another owner holds the lease.
const acquireScript = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`

// renewScript extends one lease if this owner holds it.
// KEYS[1]=lease key; ARGV[1]=owner, ARGV[2]=ttl ms; returns 1 if renewed.
const renewScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`

// Config configures a baseline Worker. Zero durations take the defaults of
// pollworker (TTL 30s, renew, heartbeat and discovery every 10s).
type Config struct {
	Client            *redis.Client
	Keys              keyspace.Space
	ID                string
	TTL               time.Duration
	RenewInterval     time.Duration
	HeartbeatTTL      time.Duration
	DiscoveryInterval time.Duration
	// Poll is called for each poll of a held session.
	Poll func(session, worker string)
}

// Worker is one replica of the naive design.
type Worker struct {
	cfg Config

	mu   sync.Mutex
	held map[string]*held
	wg   sync.WaitGroup
}

type held struct {
	owner  string
	cancel context.CancelFunc
}

// New returns a Worker with defaults filled in.
func New(cfg Config) *Worker {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.TTL, 30*time.Second)
	def(&cfg.RenewInterval, 10*time.Second)
	def(&cfg.HeartbeatTTL, 30*time.Second)
	def(&cfg.DiscoveryInterval, 10*time.Second)
	return &Worker{cfg: cfg, held: map[string]*held{}}
}

// Count is the number of leases the worker believes it holds.
func (w *Worker) Count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held)
}

// Run works until ctx is done, then stops polling and deletes its heartbeat
// key; its leases are left to expire (handoff only by TTL expiry).
func (w *Worker) Run(ctx context.Context) error {
	var loops sync.WaitGroup
	loops.Add(1)
	go func() { defer loops.Done(); w.renewLoop(ctx) }()
	round := time.NewTicker(w.cfg.DiscoveryInterval)
	defer round.Stop()
	for {
		w.round(ctx)
		select {
		case <-ctx.Done():
		case <-round.C:
			continue
		}
		break
	}
	loops.Wait()
	w.mu.Lock()
	for id, h := range w.held {
		h.cancel()
		delete(w.held, id)
	}
	w.mu.Unlock()
	w.wg.Wait()
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return w.cfg.Client.Del(dctx, w.cfg.Keys.Node(w.cfg.ID)).Err()
}

func (w *Worker) round(ctx context.Context) {
	c, keys := w.cfg.Client, w.cfg.Keys
	if err := c.Set(ctx, keys.Node(w.cfg.ID), w.cfg.ID, w.cfg.HeartbeatTTL).Err(); err != nil {
		return
	}
	nodeKeys, err := scan(ctx, c, keys.Node("*"))
	if err != nil {
		return
	}
	prefix := len(keys.Node(""))
	ids := make([]string, len(nodeKeys))
	for i, k := range nodeKeys {
		ids[i] = k[prefix:]
	}
	table := hrw.NewIDs(ids...)
	sessions, err := w.loadSessions(ctx)
	if err != nil {
		return
	}
	for _, s := range sessions {
		owner, _ := table.Owner(s.ID)
		w.mu.Lock()
		h, ok := w.held[s.ID]
		w.mu.Unlock()
		switch {
		case owner == w.cfg.ID && !ok:
			w.acquire(ctx, s)
		case owner != w.cfg.ID && ok:
			w.drop(s.ID, h) // the lease is left to expire
		}
	}
}

func (w *Worker) loadSessions(ctx context.Context) ([]session.Session, error) {
	c, keys := w.cfg.Client, w.cfg.Keys
	var out []session.Session
	prefix := len(keys.Session(""))
	var cursor uint64
	for {
		page, next, err := c.Scan(ctx, cursor, keys.Session("*"), 1000).Result()
		if err != nil {
			return nil, err
		}
		if len(page) > 0 {
			vals, err := c.MGet(ctx, page...).Result()
			if err != nil {
				return nil, err
			}
			for i, v := range vals {
				str, ok := v.(string)
				if !ok {
					continue
				}
				s, err := session.Decode(page[i][prefix:], []byte(str))
				if err != nil || s.Paused {
					continue
				}
				out = append(out, s)
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

func scan(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		page, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

func (w *Worker) acquire(ctx context.Context, s session.Session) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	owner := w.cfg.ID + "#" + hex.EncodeToString(b[:])
	keys := w.cfg.Keys
	tok, err := w.cfg.Client.Eval(ctx, acquireScript, []string{keys.Lease(s.ID), keys.Fence(s.ID)},
		owner, w.cfg.TTL.Milliseconds()).Int64()
	if err != nil || tok == 0 {
		return
	}
	pctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	w.held[s.ID] = &held{owner: owner, cancel: cancel}
	w.mu.Unlock()
	w.wg.Add(1)
	go w.pollLoop(pctx, s)
}

func (w *Worker) drop(id string, h *held) {
	h.cancel()
	w.mu.Lock()
	if w.held[id] == h {
		delete(w.held, id)
	}
	w.mu.Unlock()
}

func (w *Worker) pollLoop(ctx context.Context, s session.Session) {
	defer w.wg.Done()
	t := time.NewTicker(s.Interval.D())
	defer t.Stop()
	for {
		if w.cfg.Poll != nil {
			w.cfg.Poll(s.ID, w.cfg.ID)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) renewLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		snapshot := make(map[string]*held, len(w.held))
		for id, h := range w.held {
			snapshot[id] = h
		}
		w.mu.Unlock()
		for id, h := range snapshot {
			ok, err := RenewOne(ctx, w.cfg.Client, w.cfg.Keys, id, h.owner, w.cfg.TTL)
			if err == nil && !ok {
				w.drop(id, h)
			}
		}
	}
}

// RenewOne renews one lease with one EVAL round trip, as the naive design
// does for every lease on every renewal.
func RenewOne(ctx context.Context, c redis.Scripter, keys keyspace.Space, id, owner string, ttl time.Duration) (bool, error) {
	n, err := c.Eval(ctx, renewScript, []string{keys.Lease(id)}, owner, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// AcquireOne takes one lease with one EVAL round trip and returns its owner
// value, or "" when another owner holds it.
func AcquireOne(ctx context.Context, c redis.Scripter, keys keyspace.Space, id, holder string, ttl time.Duration) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	owner := holder + "#" + hex.EncodeToString(b[:])
	tok, err := c.Eval(ctx, acquireScript, []string{keys.Lease(id), keys.Fence(id)}, owner, ttl.Milliseconds()).Int64()
	if err != nil || tok == 0 {
		return "", err
	}
	return owner, nil
}
