package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// The checks of bad data the workers ignore or read around.
const (
	checkCorruptState = "corrupt-state"
	checkJunkMember   = "junk-member"
	checkBadFleetKey  = "bad-fleet-key"
)

// badFleetKey is the report of a fleet whose membership cannot be read
// for a key of the wrong type (nodes.ErrWrongType: the node index or the
// cordon set, written around pollworker): one problem, the others
// unchecked, so that cron tells it from Redis being unreachable (exit 1).
func badFleetKey(err error) checkReport {
	return checkReport{Checks: []string{checkBadFleetKey}, Notes: []string{},
		Problems:     []checkProblem{{Check: checkBadFleetKey, Count: 1, Detail: err.Error() + "; the other checks need the membership and were not run"}},
		ProblemCount: 1}
}

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
				probs = append(probs, checkProblem{Check: checkCorruptState, Detail: fmt.Sprintf("session %s: its saved state %s is corrupt (%s): polled as never saved; the next save overwrites it (copy the key first to keep it)",
					s.ID, a.keys.State(s.ID), v.Corrupt), Count: 1})
			}
		}
	}
	if more := n - len(probs); more > 0 {
		probs = append(probs, checkProblem{Check: checkCorruptState, Detail: fmt.Sprintf("and %d more sessions with a corrupt saved state", more), Count: more})
	}
	return probs, nil
}

// printJunkMembers prints, for status, the node index entries that are not
// live workers, at most maxUnownedShown of them.
func printJunkMembers(w io.Writer, junk []nodes.Junk) {
	if len(junk) == 0 {
		return
	}
	fmt.Fprintf(w, "ignored node index entries (not live workers; pollworker forget removes them): %d\n", len(junk))
	for _, j := range junk[:min(len(junk), maxUnownedShown)] {
		fmt.Fprintf(w, "  %s: %s\n", printableID(j.Member), j.Problem)
	}
	if more := len(junk) - maxUnownedShown; more > 0 {
		fmt.Fprintf(w, "  and %d more\n", more)
	}
}

// junkMembers reports the entries of the node index that are not live
// workers at both reads (a worker leaving is one for a moment): the
// workers ignore them, pollworker forget removes them.
func junkMembers(first, last nodes.Membership) []checkProblem {
	before := make(map[string]bool, len(first.Junk))
	for _, j := range first.Junk {
		before[j.Member] = true
	}
	var junk []nodes.Junk
	for _, j := range last.Junk {
		if before[j.Member] {
			junk = append(junk, j)
		}
	}
	var probs []checkProblem
	for _, j := range junk[:min(len(junk), maxProblemLines)] {
		fix := fmt.Sprintf("pollworker forget %s removes it", shellQuote(j.Member))
		if j.WrongType() {
			fix = fmt.Sprintf("delete or rename the key: a worker %s that runs writes it again at its next heartbeat (if none runs, pollworker forget %s)", printableID(j.Member), shellQuote(j.Member))
		}
		probs = append(probs, checkProblem{Check: checkJunkMember, Detail: fmt.Sprintf("node index entry %s is not a live worker (%s): ignored; %s",
			printableID(j.Member), j.Problem, fix), Count: 1})
	}
	if more := len(junk) - len(probs); more > 0 {
		probs = append(probs, checkProblem{Check: checkJunkMember, Detail: fmt.Sprintf("and %d more node index entries that are not live workers", more), Count: more})
	}
	return probs
}

// shellQuote quotes s for a POSIX shell when it is not a plain id.
func shellQuote(s string) string {
	if s != "" && keyspace.ValidateID(s) == nil {
		return s
	}
	if len(s) > 64 {
		return "<the member, " + strconv.Itoa(len(s)) + " bytes>"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
