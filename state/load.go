package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// Load reads the saved state of session; a session never saved (or whose
// state was deleted or lost) reads as a Record with Token 0 and nil Data,
// and so does a corrupt one, with Record.Corrupt saying why.
func (s *Store) Load(ctx context.Context, session string) (Record, error) {
	recs, err := s.LoadMany(ctx, []string{session})
	if err != nil {
		return Record{}, err
	}
	return recs[session], nil
}

// LoadMany reads the saved states of sessions with a read-only script, in
// one pipeline (one round trip per Redis shard): up to 500 sessions per
// call, and under Redis Cluster one call per hash slot. Every session asked
// for is in the map (never-saved and corrupt ones with Token 0). A corrupt
// state fails nothing but its own record (Record.Corrupt); an error from
// any call fails the whole load: no record is guessed.
func (s *Store) LoadMany(ctx context.Context, sessions []string) (map[string]Record, error) {
	for _, id := range sessions {
		if err := keyspace.ValidateID(id); err != nil {
			return nil, err
		}
	}
	calls := s.loadCalls(sessions)
	if len(calls) == 0 {
		return map[string]Record{}, nil
	}
	missing, err := s.exec(ctx, calls)
	if err == nil && len(missing) > 0 {
		// NOSCRIPT: load the script (on every master) and send those again.
		if err = s.load.Load(ctx, s.client).Err(); err != nil {
			return nil, fmt.Errorf("load states: load script: %w", err)
		}
		if missing, err = s.exec(ctx, missing); err == nil && len(missing) > 0 {
			err = fmt.Errorf("script still missing after SCRIPT LOAD")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load states: %w", err)
	}
	out := make(map[string]Record, len(sessions))
	for _, c := range calls {
		if err := c.records(out); err != nil {
			return nil, fmt.Errorf("load states: %w", err)
		}
	}
	return out, nil
}

// loadCall is one script call reading some sessions' states.
type loadCall struct {
	ids []string
	cmd *redis.Cmd
}

// loadCalls groups sessions into script calls: batchSize per call, and one
// hash slot per call under Redis Cluster.
func (s *Store) loadCalls(sessions []string) []*loadCall {
	var groups [][]string
	if !s.cluster {
		for lo := 0; lo < len(sessions); lo += s.batchSize {
			groups = append(groups, sessions[lo:min(lo+s.batchSize, len(sessions))])
		}
	} else {
		bySlot := make(map[uint16]int) // slot -> index in groups of its open group
		for _, id := range sessions {
			sl := keyspace.Slot(s.keys.State(id))
			g, ok := bySlot[sl]
			if !ok || len(groups[g]) >= s.batchSize {
				g = len(groups)
				groups = append(groups, nil)
				bySlot[sl] = g
			}
			groups[g] = append(groups[g], id)
		}
	}
	calls := make([]*loadCall, len(groups))
	for i, g := range groups {
		calls[i] = &loadCall{ids: g}
	}
	return calls
}

// exec sends calls in one pipeline and returns those that met NOSCRIPT;
// any other error fails it.
func (s *Store) exec(ctx context.Context, calls []*loadCall) (noscript []*loadCall, err error) {
	pipe := s.client.Pipeline()
	for _, c := range calls {
		args := make([]any, 0, 3+len(c.ids))
		args = append(args, "evalsha", s.load.Hash(), len(c.ids))
		for _, id := range c.ids {
			args = append(args, s.keys.State(id))
		}
		c.cmd = redis.NewCmd(ctx, args...)
		c.cmd.SetFirstKeyPos(3) // for Cluster routing
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range calls {
		switch err := c.cmd.Err(); {
		case err == nil:
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			noscript = append(noscript, c)
		default:
			return nil, err
		}
	}
	return noscript, nil
}

// records parses c's reply into out. A session whose state is corrupt
// (a key of the wrong type, a field missing or not a decimal) reads as
// never saved, with Record.Corrupt saying why: one bad record never fails
// the others.
func (c *loadCall) records(out map[string]Record) error {
	vals, err := c.cmd.Slice()
	if err != nil {
		return err
	}
	if len(vals) != 1+5*len(c.ids) {
		return fmt.Errorf("script reply has %d values, want %d", len(vals), 1+5*len(c.ids))
	}
	now, ok := vals[0].(int64)
	if !ok {
		return fmt.Errorf("script reply: server time %v", vals[0])
	}
	for i, id := range c.ids {
		r, problem := parseRecord(vals[1+5*i : 6+5*i])
		r.Read = msTime(now)
		if problem != "" {
			r = Record{Read: r.Read, Corrupt: problem}
		}
		out[id] = r
	}
	return nil
}

// parseRecord reads the five values state_load.lua returns for one
// session; problem says why they are not a saved state ("" when they are,
// or when nothing was saved).
func parseRecord(v []any) (r Record, problem string) {
	if p, ok := v[4].(string); ok {
		return Record{}, "the key is not a hash: " + p
	}
	if absent(v[1]) {
		return Record{}, "" // never saved (a hash without a token reads so too)
	}
	data, ok := v[0].(string)
	if !ok {
		return Record{}, "field data is missing"
	}
	token, err := parseInt(v[1])
	if err != nil {
		return Record{}, "field token: " + err.Error()
	}
	if token >= maxToken {
		return Record{}, fmt.Sprintf("field token: %d is at or above 2^53-1, above every fencing token", token)
	}
	saved, err := parseInt(v[2])
	if err != nil {
		return Record{}, "field saved: " + err.Error()
	}
	polled, err := parseInt(v[3])
	if err != nil {
		return Record{}, "field polled: " + err.Error()
	}
	return Record{Data: []byte(data), Token: token, Saved: msTime(saved), PolledAt: msTime(polled)}, ""
}

// absent reports a field the session's hash lacks: Lua's false arrives as
// a nil (RESP2) or as false (RESP3).
func absent(v any) bool {
	b, isBool := v.(bool)
	return v == nil || isBool && !b
}

// maxToken is above every fencing token: package lease mints none at or
// above 2^53-1 (exact in Lua's doubles below it).
const maxToken = 1<<53 - 1

// parseInt reads a decimal field of the state hash, from 0 to 2^63-1.
func parseInt(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, errors.New("missing")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%.40q is not a decimal from 0 to 2^63-1", s)
	}
	return n, nil
}

// LoadBatched is Load for many concurrent callers, such as the poll loops
// of a worker that has just taken many sessions: a call made while a load
// is in flight waits for it to end and then goes out with every other call
// made meanwhile, in one LoadMany. N concurrent calls thus cost a few
// pipelines instead of N script calls. ctx bounds this call's wait; the
// batch it joins runs in a goroutine that ends once no call waits, each
// batch until the latest deadline of its calls' contexts and at most the
// store's load timeout (WithLoadTimeout): a batch never outlives every
// caller's deadline. An error fails every call of its batch.
func (s *Store) LoadBatched(ctx context.Context, session string) (Record, error) {
	if err := keyspace.ValidateID(session); err != nil {
		return Record{}, err
	}
	r := &loadReq{ctx: ctx, id: session, done: make(chan struct{})}
	b := &s.batch
	b.mu.Lock()
	b.pending = append(b.pending, r)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if lead {
		go s.runBatches(context.WithoutCancel(ctx))
	}
	select {
	case <-r.done:
		if r.err != nil {
			// The batch failed as the caller's time ran out (its read
			// deadline is the caller's, so the read can time out a moment
			// before the context says so): report the caller's deadline.
			if err := ctx.Err(); err != nil {
				return Record{}, err
			}
			if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
				return Record{}, context.DeadlineExceeded
			}
		}
		return r.rec, r.err
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
}

// batcher holds the calls of LoadBatched waiting for a batch.
type batcher struct {
	mu      sync.Mutex
	pending []*loadReq
	running bool // a runBatches goroutine is running
}

// loadReq is one LoadBatched call.
type loadReq struct {
	ctx  context.Context // the caller's
	id   string
	done chan struct{} // closed when rec and err are set
	rec  Record
	err  error
}

// runBatches loads the pending calls, batch after batch, until none is
// left.
func (s *Store) runBatches(base context.Context) {
	b := &s.batch
	for {
		b.mu.Lock()
		batch := b.pending
		b.pending = nil
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ids := make([]string, 0, len(batch))
		seen := make(map[string]bool, len(batch))
		for _, r := range batch {
			if !seen[r.id] {
				seen[r.id] = true
				ids = append(ids, r.id)
			}
		}
		ctx, cancel := context.WithDeadline(base, s.batchDeadline(batch))
		recs, err := s.LoadMany(ctx, ids)
		cancel()
		for _, r := range batch {
			r.rec, r.err = recs[r.id], err
			close(r.done)
		}
	}
}

// batchDeadline is the latest deadline of the batch's calls, at most the
// load timeout from now.
func (s *Store) batchDeadline(batch []*loadReq) time.Time {
	limit := time.Now().Add(s.loadTimeout)
	var latest time.Time
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok || d.After(limit) {
			return limit
		}
		if d.After(latest) {
			latest = d
		}
	}
	return latest
}
