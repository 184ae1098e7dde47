package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseMonitorLine(t *testing.T) {
	tests := []struct {
		name string
		give string
		want StateEvent
		ok   bool
	}{
		{"mint", `+1795482626.575300 [0 lua] "SET" "poll:lease:{s1}" "w1#inc.0123" "NX" "PX" "10000"`,
			StateEvent{Session: "s1", Kind: StateMint, Owner: "w1#inc.0123"}, true},
		{"a script's read of a lease", `+1795482626.575300 [0 lua] "GET" "poll:lease:{s1}"`,
			StateEvent{Session: "s1", Kind: stateLeaseRead}, true},
		{"save with escaped data", `+1795482626.575370 [0 lua] "HSET" "poll:state:{a:b}" "data" "{\"v\":1,\"x\":\"\\n\xff\"}" "token" "42" "saved" "1" "polled" "0"`,
			StateEvent{Session: "a:b", Kind: StateSave, Token: 42}, true},
		{"a save call", `+1795482626.575300 [0 127.0.0.1:5000] "evalsha" "` + stateSaveSHA + `" "2" "poll:lease:{s1}" "poll:state:{s1}" "w1#x" "77" "{}" "3"`,
			StateEvent{Session: "s1", Kind: StateAttempt, Token: 77, Owner: "w1#x"}, true},
		{"a client's SET is not a mint", `+1795482626.575300 [0 127.0.0.1:5000] "SET" "poll:lease:{s1}" "w1#x"`, StateEvent{}, false},
		{"a fencing record is not a mint", `+1795482626.575300 [0 lua] "HSET" "poll:fencing:{s1}" "token" "7"`, StateEvent{}, false},
		{"the script call itself", `+1795482626.575300 [0 127.0.0.1:5000] "evalsha" "abc" "2" "poll:lease:{s1}" "poll:state:{s1}"`, StateEvent{}, false},
		{"another key", `+1795482626.575300 [0 lua] "SET" "poll:leases:{s1}" "w1#x"`, StateEvent{}, false},
		{"unterminated", `+1795482626.575300 [0 lua] "SET" "poll:lease:{s1}" "w1#x`, StateEvent{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseMonitorLine(tt.give)
			require.Equal(t, tt.ok, ok)
			if ok {
				got.At = time.Time{}
				require.Equal(t, tt.want, got)
			}
		})
	}
}

func TestCheckStateWrites(t *testing.T) {
	// tokens stand for owner values too: owner "o<tok>"
	owner := func(tok int64) string { return fmt.Sprintf("o%d", tok) }
	mint := func(s string, tok int64) StateEvent {
		return StateEvent{Session: s, Kind: StateMint, Owner: owner(tok)}
	}
	save := func(s string, tok int64) StateEvent { return StateEvent{Session: s, Kind: StateSave, Token: tok} }
	try := func(s string, tok int64) StateEvent {
		return StateEvent{Session: s, Kind: StateAttempt, Token: tok, Owner: owner(tok)}
	}
	// put is a save call and the save it made
	put := func(s string, tok int64) []StateEvent { return []StateEvent{try(s, tok), save(s, tok)} }
	cat := func(parts ...any) []StateEvent {
		var out []StateEvent
		for _, p := range parts {
			switch p := p.(type) {
			case StateEvent:
				out = append(out, p)
			case []StateEvent:
				out = append(out, p...)
			}
		}
		return out
	}
	tests := []struct {
		name                   string
		give                   []StateEvent
		saves, stale, backward int
		attempts               int // stale ones
	}{
		{"a stale attempt refused", cat(mint("a", 5), put("a", 5), mint("a", 9), try("a", 5), put("a", 9)), 2, 0, 0, 1},
		{"current holders", cat(mint("a", 5), put("a", 5), put("a", 5), mint("a", 9), put("a", 9), mint("b", 3), put("b", 3)), 4, 0, 0, 0},
		{"a save after a newer mint", cat(mint("a", 5), put("a", 5), mint("a", 9), put("a", 5)), 2, 1, 0, 1},
		{"a token back, its mint missed", cat(mint("a", 5), put("a", 9), put("a", 5)), 2, 0, 1, 0},
		{"a stale save before the successor's", cat(mint("a", 5), mint("a", 9), put("a", 5), put("a", 9)), 2, 1, 0, 1},
		{"a mint missed hides nothing wrong", cat(mint("a", 5), put("a", 9), put("a", 9)), 2, 0, 0, 0},
		{"sessions apart", cat(mint("a", 9), mint("b", 2), put("b", 2)), 1, 0, 0, 0},
		{"one owner value minted twice (a retried SET) is one term", cat(mint("a", 5), mint("a", 5), put("a", 5)), 1, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := CheckStateWrites(tt.give)
			require.Equal(t, tt.saves, rep.Saves)
			require.Len(t, rep.Stale, tt.stale)
			require.Len(t, rep.Backwards, tt.backward)
			require.Equal(t, tt.attempts, rep.StaleAttempts)
		})
	}
}
