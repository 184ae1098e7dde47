package state

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/scripts/lua"
)

// Slots is what a scheduled session's state says of its slots (package
// schedule): the last slot a holder started, the last it finished and how.
// A slot started and not finished was running when its holder stopped
// (a crash): it may have run.
type Slots struct {
	// Started is the slot time of the last slot started; zero: none.
	Started time.Time
	// Finished is the slot time of the last slot finished; zero: none.
	Finished time.Time
	// Outcome is how Finished ended ("ok", "error", ...).
	Outcome string
	// Token is the fencing token of the lease that wrote them.
	Token int64
	// Cut, when at or after Finished, says the slots recorded do not
	// carry over: the session was removed, paused or resumed, or its
	// schedule changed, since (scripts/lua/state_cut.lua, written by
	// package session). A holder then treats it as new. Zero: none.
	Cut time.Time
	// Corrupt says why the fields are unreadable ("" when readable or
	// absent); they then read as none.
	Corrupt string
}

var slotScript = redis.NewScript(lua.StateSlot)

// SlotStarted records slot as the last slot started of l's session, fenced
// by l (ErrStale when l is no longer the session's lease, or a newer token
// wrote the slot fields). Any other error leaves the outcome unknown.
func (s *Store) SlotStarted(ctx context.Context, l *lease.Lease, slot time.Time) error {
	return s.saveSlot(ctx, l, "started", slot, "")
}

// SlotFinished records slot as the last slot finished of l's session, and
// its outcome, fenced by l as SlotStarted is.
func (s *Store) SlotFinished(ctx context.Context, l *lease.Lease, slot time.Time, outcome string) error {
	return s.saveSlot(ctx, l, "finished", slot, outcome)
}

func (s *Store) saveSlot(ctx context.Context, l *lease.Lease, which string, slot time.Time, outcome string) error {
	id := l.Session()
	reply, err := slotScript.Run(ctx, s.client, []string{s.keys.Lease(id), s.keys.State(id)},
		l.Owner(), strconv.FormatInt(l.Token(), 10), which, slot.UnixMilli(), outcome).Slice()
	if err != nil {
		return fmt.Errorf("save slot of %s: %w", id, err)
	}
	if len(reply) == 2 {
		if ok, _ := reply[0].(int64); ok == 1 {
			return nil
		}
		switch reason, _ := reply[1].(string); reason {
		case "lease":
			return fmt.Errorf("%w: session %s: %w by %s (token %d)", ErrStale, id, ErrNotHeld, l.Owner(), l.Token())
		case "token":
			return fmt.Errorf("%w: session %s: its slots were written under a token above %d", ErrStale, id, l.Token())
		case "type":
			return fmt.Errorf("save slot of %s: %w", id, ErrNotAHash)
		}
	}
	return fmt.Errorf("save slot of %s: unexpected script reply %v", id, reply)
}

// LoadSlots reads what session's state says of its slots. Unreadable
// fields read as none, with Slots.Corrupt saying why; only a Redis error
// is an error.
func (s *Store) LoadSlots(ctx context.Context, session string) (Slots, error) {
	if err := keyspace.ValidateID(session); err != nil {
		return Slots{}, err
	}
	m, err := s.LoadSlotsMany(ctx, []string{session})
	if err != nil {
		return Slots{}, err
	}
	return m[session], nil
}

// parseSlots reads the five slot fields (each nil when absent).
func parseSlots(v []any) Slots {
	var out Slots
	for i, field := range []string{"slot_started", "slot_finished", "", "slot_token", "slot_cut"} {
		if field == "" || v[i] == nil {
			continue
		}
		n, err := parseInt(v[i])
		if err != nil {
			return Slots{Corrupt: "field " + field + ": " + err.Error()}
		}
		switch i {
		case 0:
			out.Started = time.UnixMilli(n).UTC()
		case 1:
			out.Finished = time.UnixMilli(n).UTC()
		case 3:
			out.Token = n
		case 4:
			out.Cut = time.UnixMilli(n).UTC()
		}
	}
	if o, ok := v[2].(string); ok {
		out.Outcome = o
	}
	return out
}

// LoadSlotsMany is LoadSlots for many sessions, in one pipeline. Every
// session asked for is in the map.
func (s *Store) LoadSlotsMany(ctx context.Context, sessions []string) (map[string]Slots, error) {
	for _, id := range sessions {
		if err := keyspace.ValidateID(id); err != nil {
			return nil, err
		}
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(sessions))
	for i, id := range sessions {
		cmds[i] = pipe.HMGet(ctx, s.keys.State(id), "slot_started", "slot_finished", "slot_outcome", "slot_token", "slot_cut")
	}
	_, _ = pipe.Exec(ctx)
	out := make(map[string]Slots, len(sessions))
	for i, id := range sessions {
		vals, err := cmds[i].Result()
		switch {
		case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
			out[id] = Slots{Corrupt: "the key is not a hash"}
		case err != nil:
			return nil, fmt.Errorf("load slots: %w", err)
		default:
			out[id] = parseSlots(vals)
		}
	}
	return out, nil
}

// Carried reports whether the slots recorded carry over to the session's
// next holder: no cut at or after the last slot finished (Cut).
func (sl Slots) Carried() bool {
	return sl.Cut.IsZero() || sl.Cut.Before(sl.Finished)
}
