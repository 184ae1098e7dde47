package session

import (
	"context"
	"sync"

	"go.uber.org/zap"
)

// Loader loads sessions through a Store and logs each distinct malformed
// entry once (a Warn with fields session and reason), not on every reload.
// A problem is distinct by its id and its value: rewriting a malformed
// value with another malformed one logs again, and so does a problem that
// comes back after it was fixed. Loader is safe for concurrent use.
type Loader struct {
	store *Store
	log   *zap.Logger

	mu       sync.Mutex
	reported map[problemKey]struct{} // guarded by mu; problems of the last load
	byID     map[string]uint64       // guarded by mu; problems reported by Fetch
	logged   int                     // guarded by mu
}

type problemKey struct {
	id  string
	sum uint64
}

// NewLoader returns a Loader over store, logging to the store's logger.
func NewLoader(store *Store) *Loader {
	return &Loader{store: store, log: store.log, reported: map[problemKey]struct{}{}, byID: map[string]uint64{}}
}

// Load is Store.Load, plus one log line for each malformed entry not
// reported by an earlier Load.
func (l *Loader) Load(ctx context.Context) (Snapshot, error) {
	snap, err := l.store.Load(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := make(map[problemKey]struct{}, len(snap.Malformed))
	for _, p := range snap.Malformed {
		k := problemKey{id: p.ID, sum: p.sum}
		now[k] = struct{}{}
		if _, ok := l.reported[k]; ok {
			continue
		}
		l.logged++
		l.log.Warn("malformed session skipped", zap.String("session", clip(p.ID)), zap.String("reason", p.Err.Error()))
	}
	l.reported = now
	return snap, nil
}

// Fetch is Store.Fetch, plus one log line for each malformed entry not
// reported by an earlier Fetch of the same id with the same problem. An id
// fetched valid or missing is forgotten, so a problem that comes back is
// logged again.
func (l *Loader) Fetch(ctx context.Context, ids []string) ([]Session, []Problem, error) {
	sessions, problems, err := l.store.Fetch(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := make(map[string]struct{}, len(problems))
	for _, p := range problems {
		bad[p.ID] = struct{}{}
		if sum, ok := l.byID[p.ID]; ok && sum == p.sum {
			continue
		}
		l.byID[p.ID] = p.sum
		l.logged++
		l.log.Warn("malformed session skipped", zap.String("session", clip(p.ID)), zap.String("reason", p.Err.Error()))
	}
	for _, id := range ids {
		if _, ok := bad[id]; !ok {
			delete(l.byID, id)
		}
	}
	return sessions, problems, nil
}

// Logged is the number of distinct problems logged so far.
func (l *Loader) Logged() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.logged
}

// Malformed is the number of malformed entries found by the last successful
// Load (Fetch is not counted: its caller knows which ids it asked for).
func (l *Loader) Malformed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reported)
}

// clip shortens an id for a log line: an invalid id in the index may be long.
func clip(s string) string {
	const n = 256
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
