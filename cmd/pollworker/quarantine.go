package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// maxQuarantineSlots bounds the loss markers readQuarantine reads under
// Redis Cluster (one per hash slot of the sessions asked about): sessions
// of the slots beyond it are left unclassified.
const maxQuarantineSlots = 64

// quarantineView is what the loss markers say about some unowned sessions:
// which of them wait out a loss quarantine (nobody takes a free lease in
// their hash slot: a new keyspace, or Redis lost data), a wait and not a
// failure.
type quarantineView struct {
	// Sessions are the sessions in quarantine, or whose slot starts one
	// at its next acquisition (its marker is missing or another
	// server's).
	Sessions map[string]struct{} `json:"-"`
	// Count is len(Sessions).
	Count int `json:"count"`
	// LeftMs is the longest quarantine left among them; 0 when each one
	// starts at the next acquisition.
	LeftMs int64 `json:"left_ms"`
	// Pending is set when some marker is missing or another server's:
	// the quarantine starts at the next acquisition.
	Pending bool `json:"pending"`
}

// holds reports whether session id waits out the quarantine.
func (q quarantineView) holds(id string) bool {
	_, ok := q.Sessions[id]
	return ok
}

// text says it in one line.
func (q quarantineView) text() string {
	end := "starts at the next acquisition, then lasts --loss-quarantine (the lease TTL by default)"
	if q.LeftMs > 0 {
		end = "ends in " + msDuration(q.LeftMs)
	}
	return fmt.Sprintf("%d active sessions wait out the loss quarantine (new keyspace or lost data: no free lease is taken until "+
		"every lease granted before has ended; `pollworker init` spares a new keyspace this), which %s", q.Count, end)
}

// readQuarantine reads the loss markers of the hash slots of the sessions
// ids (slot 0 outside Cluster, where one marker covers the keyspace) and
// returns those in quarantine. now is the server's clock.
func readQuarantine(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, ids []string, now time.Time) (quarantineView, error) {
	q := quarantineView{Sessions: map[string]struct{}{}}
	_, cluster := client.(*redis.ClusterClient)
	facts := map[uint16]*lossFacts{}
	for _, id := range ids {
		slot := uint16(0)
		if cluster {
			slot = keyspace.Slot(keys.Lease(id))
		}
		f, ok := facts[slot]
		if !ok {
			if len(facts) >= maxQuarantineSlots {
				continue
			}
			read, err := readLoss(ctx, client, keys, id, now)
			if err != nil {
				return quarantineView{}, err
			}
			f = &read
			facts[slot] = f
		}
		restarted := f.ServerRunID != "" && f.RunID != f.ServerRunID
		switch {
		case !f.Present || restarted:
			q.Pending = true
		case f.QuarantineLeftMs > 0:
			q.LeftMs = max(q.LeftMs, f.QuarantineLeftMs)
		default:
			continue
		}
		q.Sessions[id] = struct{}{}
	}
	q.Count = len(q.Sessions)
	return q, nil
}

// unownedOf returns the sessions of active without an owner in holdings.
func unownedOf(active []string, holdings map[string]lease.Holding) []string {
	var out []string
	for _, id := range active {
		if holdings[id].Owner == "" {
			out = append(out, id)
		}
	}
	return out
}
