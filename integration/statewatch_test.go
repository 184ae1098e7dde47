package integration

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// stateWatch follows Redis's MONITOR stream, in which the commands a
// script runs appear in execution order after the script call ("[0 lua]"),
// and records the leases taken (acquire.lua's SET of a lease key, with the
// new owner value; a SET NX that failed is followed at once by the
// script's GET of the same key, and is dropped), the save calls (with the
// caller's owner value and token) and the states written (state_save.lua's
// HSET of a state key, with the writer's token): what CheckStateWrites
// needs to tell whether a save was accepted from a holder whose lease was
// no longer current. It reconnects when Redis restarts (what runs
// meanwhile is not seen).
type stateWatch struct {
	addr string
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	events []StateEvent
	conns  int // MONITOR connections made
}

// startStateWatch follows the MONITOR stream of the Redis at addr until
// the test ends.
func startStateWatch(t *testing.T, addr string) *stateWatch {
	t.Helper()
	w := &stateWatch{addr: addr, stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	go w.run(ready)
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatalf("MONITOR on %s did not start", addr)
	}
	t.Cleanup(w.close)
	return w
}

func (w *stateWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// snapshot returns the events so far, in execution order.
func (w *stateWatch) snapshot() []StateEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]StateEvent(nil), w.events...)
}

func (w *stateWatch) run(ready chan struct{}) {
	defer close(w.done)
	for {
		w.follow(ready)
		select {
		case <-w.stop:
			return
		case <-time.After(50 * time.Millisecond): // Redis is down: try again
		}
	}
}

// follow reads one MONITOR connection until it fails or the watch stops.
func (w *stateWatch) follow(ready chan struct{}) {
	conn, err := net.DialTimeout("tcp", w.addr, time.Second)
	if err != nil {
		return
	}
	defer conn.Close()
	go func() {
		select {
		case <-w.stop:
			_ = conn.Close()
		case <-w.done:
		}
	}()
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		return
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	first, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "+OK") {
		return
	}
	w.mu.Lock()
	w.conns++
	if w.conns == 1 {
		close(ready)
	}
	w.mu.Unlock()
	mintBefore := "" // the session of a mint parsed from the line before, if any
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		ev, ok := parseMonitorLine(strings.TrimRight(line, "\r\n"))
		switch {
		case ok && ev.Kind == stateLeaseRead:
			if mintBefore == ev.Session { // the SET NX just before failed
				w.mu.Lock()
				w.events = w.events[:len(w.events)-1]
				w.mu.Unlock()
			}
			mintBefore = ""
		case ok:
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
			mintBefore = ""
			if ev.Kind == StateMint {
				mintBefore = ev.Session
			}
		default:
			mintBefore = ""
		}
	}
}

// stateLeaseRead is a script's GET of a lease key: after a SET NX of the
// same key on the line before, it says the SET NX failed.
const stateLeaseRead StateKind = "lease-read"

// stateSaveSHA names the state save script in EVALSHA calls.
var stateSaveSHA = redis.NewScript(lua.StateSave).Hash()

// parseMonitorLine reads one MONITOR line of a script's SET or GET of a
// lease key or HSET of a session's state, or of a client's call of the save
// script:
//
//	+1795482626.575355 [0 lua] "SET" "poll:lease:{s1}" "w1#inc.0123" "NX" "PX" "10000"
//	+1795482626.575356 [0 lua] "GET" "poll:lease:{s1}"
//	+1795482626.575370 [0 lua] "HSET" "poll:state:{s1}" "data" "..." "token" "17..." ...
func parseMonitorLine(line string) (StateEvent, bool) {
	if !strings.HasPrefix(line, "+") {
		return StateEvent{}, false
	}
	head, rest, ok := strings.Cut(line[1:], " [")
	if !ok {
		return StateEvent{}, false
	}
	source, rest, ok := strings.Cut(rest, "] ")
	if !ok {
		return StateEvent{}, false
	}
	args, ok := monitorArgs(rest)
	if !ok || len(args) < 2 {
		return StateEvent{}, false
	}
	sec, err := strconv.ParseFloat(head, 64)
	if err != nil {
		return StateEvent{}, false
	}
	at := time.Unix(0, int64(sec*1e9))
	keys := keyspace.Space{}
	lua := strings.HasSuffix(source, " lua")
	switch cmd := strings.ToUpper(args[0]); {
	case !lua && cmd == "EVALSHA" && args[1] == stateSaveSHA && len(args) >= 8:
		// evalsha sha 2 <lease key> <state key> <owner> <token> <data> <ago>
		id := strings.TrimSuffix(strings.TrimPrefix(args[4], "poll:state:{"), "}")
		tok, err := strconv.ParseInt(args[6], 10, 64)
		if keys.State(id) != args[4] || err != nil {
			return StateEvent{}, false
		}
		return StateEvent{Session: id, Kind: StateAttempt, Token: tok, Owner: args[5], At: at}, true
	case !lua:
		return StateEvent{}, false
	case (cmd == "SET" && len(args) >= 3 || cmd == "GET") && strings.HasPrefix(args[1], "poll:lease:{"):
		id := strings.TrimSuffix(strings.TrimPrefix(args[1], "poll:lease:{"), "}")
		if keys.Lease(id) != args[1] {
			return StateEvent{}, false
		}
		if cmd == "GET" {
			return StateEvent{Session: id, Kind: stateLeaseRead, At: at}, true
		}
		return StateEvent{Session: id, Kind: StateMint, Owner: args[2], At: at}, true
	case cmd == "HSET" && strings.HasPrefix(args[1], "poll:state:{"):
		id := strings.TrimSuffix(strings.TrimPrefix(args[1], "poll:state:{"), "}")
		if keys.State(id) != args[1] {
			return StateEvent{}, false
		}
		for i := 2; i+1 < len(args); i += 2 {
			if args[i] == "token" {
				tok, err := strconv.ParseInt(args[i+1], 10, 64)
				if err != nil {
					return StateEvent{}, false
				}
				return StateEvent{Session: id, Kind: StateSave, Token: tok, At: at}, true
			}
		}
	}
	return StateEvent{}, false
}

// monitorArgs splits the quoted, escaped arguments of a MONITOR line
// (Redis's sdscatrepr: \\ \" \n \r \t \a \b \xHH).
func monitorArgs(s string) ([]string, bool) {
	var args []string
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return args, true
		}
		if s[0] != '"' {
			return nil, false
		}
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 >= len(s) {
				return nil, false
			}
			i++
			switch c := s[i]; c {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return nil, false
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return nil, false
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(c)
			}
		}
		if i >= len(s) {
			return nil, false
		}
		args = append(args, b.String())
		s = s[i+1:]
	}
}
