package session

import (
	"context"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/scripts/lua"
)

// A scheduled session's state records the last slot its holders ran
// (package state). A write that removes, pauses or resumes a scheduled
// session, or changes its schedule, marks there that those slots do not
// carry over (scripts/lua/state_cut.lua), before the change is recorded:
// its next holder treats it as new and runs no slot due before it took it
// (not the slots due while it was removed or paused, nor the previous
// schedule's). Only a state that recorded a slot is written.

// queueSlotCut queues the cut of session id's recorded slots in p.
func (s *Store) queueSlotCut(ctx context.Context, p redis.Pipeliner, id string) {
	p.Eval(ctx, lua.StateCut, []string{s.keys.State(id)})
}

// cutSlots cuts the recorded slots of ids, in one pipeline. Best effort:
// a failure is logged, and the change is recorded all the same (its
// holders may then catch up slots of before the change).
func (s *Store) cutSlots(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			s.queueSlotCut(ctx, p, id)
		}
		return nil
	})
	if err != nil {
		for i, c := range cmds {
			if c.Err() != nil {
				s.log.Warn("could not mark the recorded slots of a changed schedule as not carried over",
					zap.String("session", ids[i]), zap.Error(c.Err()))
				return
			}
		}
	}
}

// cutsSlots reports whether writing next over the value old (present
// when there was one) cuts next's recorded slots: next is scheduled and
// is new, resumed, or has another schedule than old.
func cutsSlots(old []byte, present bool, next Session) bool {
	if next.Schedule == "" || next.Paused {
		return false
	}
	if !present {
		return true
	}
	prev, err := Decode(next.ID, old)
	if err != nil {
		return true
	}
	return prev.Paused || scheduleOf(prev) != scheduleOf(next)
}

// slotRules are the fields of a Session that decide its slots.
type slotRules struct {
	schedule, tz, catchUp string
	jitter, window        Duration
}

func scheduleOf(s Session) slotRules {
	return slotRules{schedule: s.Schedule, tz: s.TZ, catchUp: s.CatchUp, jitter: s.Jitter, window: s.CatchUpWindow}
}
