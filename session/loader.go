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

	mu        sync.Mutex
	reported  map[string]uint64 // guarded by mu; id -> fingerprint of its problem, as last logged
	malformed int               // guarded by mu; malformed entries of the last Load
	logged    int               // guarded by mu
}

// NewLoader returns a Loader over store, logging to the store's logger.
func NewLoader(store *Store) *Loader {
	return &Loader{store: store, log: store.log, reported: map[string]uint64{}}
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
	l.reported = l.reportLocked(snap.Malformed) // a Load sees every id: forget the others
	l.malformed = len(snap.Malformed)
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
	now := l.reportLocked(problems)
	for _, id := range ids {
		if sum, bad := now[id]; bad {
			l.reported[id] = sum
		} else {
			delete(l.reported, id)
		}
	}
	return sessions, problems, nil
}

// reportLocked logs each problem not reported before with the same value
// and returns them all, id -> fingerprint. Caller holds l.mu.
func (l *Loader) reportLocked(problems []Problem) map[string]uint64 {
	now := make(map[string]uint64, len(problems))
	for _, p := range problems {
		now[p.ID] = p.sum
		if sum, ok := l.reported[p.ID]; ok && sum == p.sum {
			continue
		}
		l.logged++
		l.log.Warn("malformed session skipped", zap.String("session", clip(p.ID)), zap.String("reason", p.Err.Error()))
	}
	return now
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
	return l.malformed
}

// clip shortens an id for a log line: an invalid id in the index may be long.
func clip(s string) string {
	const n = 256
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
