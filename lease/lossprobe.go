package lease

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// probeLoss looks at the loss markers of the slots of gone leases (a
// renewal or a release found their keys missing or another owner's: after
// a data loss, every lease a worker holds) as an acquisition
// does, with acquire.lua for no session: a marker that is missing or
// another server's is written anew, and the slot's quarantine starts now.
// Otherwise a loss that took the sessions too (a restart without
// persistence, FLUSHALL) starts its quarantine only when the sessions are
// written again and their leases asked for, which then wait one more
// quarantine for leases that ended long before. Safe: a marker written
// now ends its quarantine LossQuarantine after now, and the loss came
// before now. A marker that may have moved (Redis Cluster asks for the
// masters) is left to the next acquisition.
func (m *Manager) probeLoss(ctx context.Context, gone []*Lease) {
	if m.cfg.LossQuarantine <= 0 || len(gone) == 0 {
		return
	}
	seen := make(map[uint16]bool)
	var calls []*call
	for _, l := range gone {
		slot := m.epochSlot(l.session)
		if seen[slot] {
			continue
		}
		seen[slot] = true
		calls = append(calls, &call{args: m.probeArgs(slot)})
	}
	m.send(ctx, m.acquire, calls, m.pipelines(len(calls)), false, func(done []*call, _ time.Time) {
		for _, c := range done {
			if c.asksMasters() {
				continue
			}
			if _, _, marker, err := acquireReply(c, 0); err != nil {
				m.log.Debug("loss marker probe failed; the next acquisition looks again", zap.Error(err))
			} else if marker != "" {
				m.noteBadMarker(c, marker)
			}
		}
	})
}

// probeArgs is the command line of acquire.lua for no session in slot:
// its loss marker, high-water mark (and, in Redis Cluster, confirmation
// time), as acquireArgs passes them.
func (m *Manager) probeArgs(slot uint16) []any {
	numKeys := 2
	if m.cluster {
		numKeys++
	}
	args := evalsha(m.acquire, numKeys, numKeys+3)
	args = append(args, m.cfg.Keys.Epoch(slot), m.cfg.Keys.EpochTokens(slot))
	masters := ""
	if m.cluster {
		args = append(args, m.cfg.Keys.EpochConfirmed(slot))
		masters = "-"
	}
	return append(args, m.ttlArg, m.quarantineArg, masters)
}
