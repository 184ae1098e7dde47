package main

import (
	"context"
	"fmt"

	"github.com/pollworker/pollworker/session"
)

// The checks of bad data the workers ignore or read around.
const (
	checkCorruptState = "corrupt-state"
)

// corruptStates reports the sessions whose saved state is corrupt
// (state.Record.Corrupt): the workers poll them as never saved, and their
// next save overwrites what is there.
func corruptStates(ctx context.Context, a admin, sessions []session.Session) ([]checkProblem, error) {
	views, err := loadStates(ctx, a, sessions)
	if err != nil {
		return nil, err
	}
	var probs []checkProblem
	n := 0
	for _, s := range sessions {
		if v := views[s.ID]; v != nil && v.Corrupt != "" {
			if n++; n <= maxProblemLines {
				probs = append(probs, checkProblem{checkCorruptState, fmt.Sprintf("session %s: its saved state %s is corrupt (%s): polled as never saved; the next save overwrites it (copy the key first to keep it)",
					s.ID, a.keys.State(s.ID), v.Corrupt), 1})
			}
		}
	}
	if more := n - len(probs); more > 0 {
		probs = append(probs, checkProblem{checkCorruptState, fmt.Sprintf("and %d more sessions with a corrupt saved state", more), more})
	}
	return probs, nil
}
