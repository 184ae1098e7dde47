package integration

import (
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
		{"mint", `+1795482626.575300 [0 lua] "HSET" "poll:fencing:{s1}" "token" "1795482626575300"`,
			StateEvent{Session: "s1", Kind: StateMint, Token: 1795482626575300}, true},
		{"save with escaped data", `+1795482626.575370 [0 lua] "HSET" "poll:state:{a:b}" "data" "{\"v\":1,\"x\":\"\\n\xff\"}" "token" "42" "saved" "1" "polled" "0"`,
			StateEvent{Session: "a:b", Kind: StateSave, Token: 42}, true},
		{"a save call", `+1795482626.575300 [0 127.0.0.1:5000] "evalsha" "` + stateSaveSHA + `" "2" "poll:lease:{s1}" "poll:state:{s1}" "w1#x" "77" "{}" "3"`,
			StateEvent{Session: "s1", Kind: StateAttempt, Token: 77}, true},
		{"a client's HSET is not a mint", `+1795482626.575300 [0 127.0.0.1:5000] "HSET" "poll:fencing:{s1}" "token" "7"`, StateEvent{}, false},
		{"a handoff mark is not a mint", `+1795482626.575300 [0 lua] "HSET" "poll:fencing:{s1}" "handoff" "7:1:2"`, StateEvent{}, false},
		{"the script call itself", `+1795482626.575300 [0 127.0.0.1:5000] "evalsha" "abc" "2" "poll:lease:{s1}" "poll:state:{s1}"`, StateEvent{}, false},
		{"another key", `+1795482626.575300 [0 lua] "SET" "poll:lease:{s1}" "w1#x"`, StateEvent{}, false},
		{"unterminated", `+1795482626.575300 [0 lua] "HSET" "poll:fencing:{s1}" "token" "17`, StateEvent{}, false},
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
	mint := func(s string, tok int64) StateEvent { return StateEvent{Session: s, Kind: StateMint, Token: tok} }
	save := func(s string, tok int64) StateEvent { return StateEvent{Session: s, Kind: StateSave, Token: tok} }
	try := func(s string, tok int64) StateEvent { return StateEvent{Session: s, Kind: StateAttempt, Token: tok} }
	tests := []struct {
		name                   string
		give                   []StateEvent
		saves, stale, backward int
		attempts               int // stale ones
	}{
		{"a stale attempt refused", []StateEvent{mint("a", 5), try("a", 5), save("a", 5), mint("a", 9), try("a", 5), try("a", 9), save("a", 9)}, 2, 0, 0, 1},
		{"current holders", []StateEvent{mint("a", 5), save("a", 5), save("a", 5), mint("a", 9), save("a", 9), mint("b", 3), save("b", 3)}, 4, 0, 0, 0},
		{"a save after a newer mint", []StateEvent{mint("a", 5), save("a", 5), mint("a", 9), save("a", 5)}, 2, 1, 0, 0},
		{"a token back, its mint missed", []StateEvent{mint("a", 5), save("a", 9), save("a", 5)}, 2, 0, 1, 0},
		{"a stale save before the successor's", []StateEvent{mint("a", 5), mint("a", 9), save("a", 5), save("a", 9)}, 2, 1, 0, 0},
		{"a mint missed hides nothing wrong", []StateEvent{mint("a", 5), save("a", 9), save("a", 9)}, 2, 0, 0, 0},
		{"sessions apart", []StateEvent{mint("a", 9), mint("b", 2), save("b", 2)}, 1, 0, 0, 0},
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
