package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// The generated chaos suite (issue 22, "make the suite find the next
// one"): where TestChaos draws one fault of a fixed list per iteration and
// re-applies the sessions after it, TestChaosGenerated draws, per
// iteration, a plan of several steps from a set of kinds: operator actions
// (sessions add, pause, resume, rm, apply, apply --prune, re-add with a new
// definition, drain, uncordon, forget), faults (worker kill -9, SIGSTOP,
// restart; Redis restart with and without persistence, FLUSHALL, memory
// pressure, CLIENT KILL, SCRIPT FLUSH), planted bad data (a wrong-typed
// lease, fencing counter, loss marker, state or node key, a fencing counter
// at or above 2^53, junk members of the node index) and load (more polls
// due than the per-host limit or the CPU lets the fleet start). It then
// checks the target's log: no overlap, no token back or shared, no poll of
// a paused or removed session later than genStopBound after the command
// returned, every active session's largest gap within its bound, and the
// workers' own reports (pollworker_behind, `pollworker check`) agreeing
// with what happened. The plan is drawn from the seed alone: the same seed
// and kinds draw the same plans. Every violation is reported (check,
// session, iteration, seed); none stops the run.

// Generated-chaos timings: those of TestChaos (chaosFlags), with a small
// per-host limit so that a load step overloads one host, and each worker's
// HTTP server on loopback so that the run can read pollworker_behind.
const (
	genSessions   = 12
	genWorkers    = 3
	genMaxWorkers = 4
	genHeartbeat  = 300 * time.Millisecond // --heartbeat-interval of chaosFlags
	genRenew      = 500 * time.Millisecond // --renew-interval of chaosFlags
	genMaxPerHost = 4
	genStopBound  = time.Second // no poll later than this after pause/rm returned (issue 22 item 1)
	// The slack of every gap bound, for process scheduling on a loaded
	// 2-core machine: the quick run (under -race, next to the other
	// tests of make test) gets more; POLLWORKER_CHAOS_SLACK sets it.
	genSlackLong   = time.Second
	genSlackQuick  = 3 * time.Second
	genQuickIters  = 3
	genQuickSteps  = 3
	genLongSteps   = 6
	genQuickSeed   = 22
	genLoadHold    = 100 * time.Millisecond // the slow host's answer time
	genLoadIvl     = 500 * time.Millisecond // interval of the load sessions
	genLoadCount   = 120                    // host-limit load: 240 due/s, 3 × 4 slots / 100 ms = 120/s
	genCPUIvl      = 10 * time.Millisecond  // CPU load: 200 sessions at 10ms, 20,000 due/s
	genCPUCount    = 200
	genLoadFor     = 6 * time.Second // a load step lasts this long: behind must show within it
	genBehindRatio = 1.5             // due/achieved from which a worker must say it is behind
	// genLoadSettle: how long after a load step's prune returned its
	// recorders may still be serving requests queued while starved.
	genLoadSettle = time.Second
)

// timeWindow is an interval of time, ends included.
type timeWindow struct{ from, to time.Time }

// abandonedServedLate reports whether p, a poll found past its lease, is
// the documented limit of a request abandoned at its timeout: its worker
// had given up on it (the recorder saw the connection close) and it was
// served during a load step (loaded), when the recorders are starved by
// design and serve requests late. A poll served to its end, or served
// late outside a load step, is still a violation: a handoff that
// abandoned its poll in flight (RELIABILITY.md, finding F1) is one.
func abandonedServedLate(loaded []timeWindow, p Poll) bool {
	if !p.Abandoned {
		return false
	}
	for _, w := range loaded {
		if !p.Start.Before(w.from) && !p.Start.After(w.to) {
			return true
		}
	}
	return false
}

// Gap allowances, derived from the configuration: what a fault justifies on
// top of the base bound (genBase), for a gap that meets its window.
var (
	// genHandoff: a planned move (drain, uncordon, join, re-plan) hands a
	// lease over; the successor sees it within a discovery round.
	genHandoff = chaosDiscovery + genRenew
	// genFailover: a holder gone without releasing: its heartbeat entry
	// expires (3 heartbeats), the orphan grace (2 discovery rounds) and the
	// lease TTL run out, then a discovery round takes it.
	genFailover = chaosTTL + 3*chaosDiscovery + 3*genHeartbeat
	// genLoss: Redis lost data: the loss quarantine, then a lease TTL and a
	// discovery round (lossRecovery), then a failover for the leases the
	// lost keys hid.
	genLoss = lossRecovery(chaosDiscovery) + genFailover
)

// genBase is the largest gap of an active session no fault justifies: its
// interval, one discovery round (a session added or resumed is seen by the
// next round at the latest) and the slack.
func genBase(interval, slack time.Duration) time.Duration {
	return interval + chaosDiscovery + slack
}

// Kind classes, for POLLWORKER_CHAOS_KINDS and the table.
const (
	classAction = "action"
	classFault  = "fault"
	classData   = "data"
	classLoad   = "load"
)

// genKind is one thing the generator may draw.
type genKind struct {
	name, class string
	// quick: in the default kinds of the quick run (`go test`): kinds
	// whose fixes are on main and that fit its time budget.
	quick bool
	// long: only when named, or in POLLWORKER_CHAOS=long's default set
	// (heavy on a 2-core machine).
	long bool
	run  func(w *genWorld, st *genStep)
}

// genKinds lists every kind. Kept in table order.
var genKinds = []genKind{
	{name: "add", class: classAction, quick: true, run: (*genWorld).doAdd},
	{name: "pause", class: classAction, quick: true, run: (*genWorld).doPause},
	{name: "resume", class: classAction, quick: true, run: (*genWorld).doResume},
	{name: "rm", class: classAction, quick: true, run: (*genWorld).doRemove},
	{name: "apply", class: classAction, quick: true, run: (*genWorld).doApply},
	{name: "apply-prune", class: classAction, quick: true, run: (*genWorld).doApplyPrune},
	{name: "re-add-new-definition", class: classAction, quick: true, run: (*genWorld).doReAdd},
	{name: "drain", class: classAction, quick: true, run: (*genWorld).doDrain},
	{name: "uncordon", class: classAction, quick: true, run: (*genWorld).doUncordon},
	{name: "forget", class: classAction, quick: true, run: (*genWorld).doForget},
	{name: "worker-kill-9", class: classFault, quick: true, run: (*genWorld).doKill},
	{name: "worker-sigstop", class: classFault, quick: true, run: (*genWorld).doStop},
	{name: "worker-restart", class: classFault, quick: true, run: (*genWorld).doRestart},
	{name: "redis-restart-persisted", class: classFault, quick: true, run: (*genWorld).doRedisRestartPersisted},
	{name: "redis-restart-empty", class: classFault, quick: true, run: (*genWorld).doRedisRestartEmpty},
	{name: "flushall", class: classFault, quick: true, run: (*genWorld).doFlushAll},
	{name: "memory-pressure", class: classFault, quick: true, run: (*genWorld).doMemoryPressure},
	{name: "client-kill", class: classFault, quick: true, run: (*genWorld).doClientKill},
	{name: "script-flush", class: classFault, quick: true, run: (*genWorld).doScriptFlush},
	{name: "bad-lease-type", class: classData, quick: true, run: plantSessionKey("lease")},
	{name: "bad-fence-type", class: classData, quick: true, run: plantSessionKey("fence")},
	{name: "bad-state", class: classData, quick: true, run: plantSessionKey("state")},
	{name: "bad-marker-type", class: classData, quick: true, run: (*genWorld).doBadMarker},
	{name: "bad-node-type", class: classData, quick: true, run: (*genWorld).doBadNode},
	{name: "huge-fence", class: classData, quick: true, run: (*genWorld).doHugeFence},
	{name: "bad-high-water", class: classData, quick: true, run: (*genWorld).doBadHighWater},
	{name: "junk-members", class: classData, quick: true, run: (*genWorld).doJunkMembers},
	{name: "overload-host-limit", class: classLoad, quick: true, run: (*genWorld).doLoadHost},
	{name: "overload-cpu", class: classLoad, long: true, run: (*genWorld).doLoadCPU},
}

// Checks, the columns of the table.
const (
	checkOverlap     = "overlap"
	checkTokenBack   = "token-back"
	checkTokenShared = "token-shared"
	checkPastLease   = "past-deadline"
	checkStateWrite  = "stale-state-write"
	checkAfterStop   = "polled-after-stop"
	checkGap         = "gap"
	checkBehind      = "behind-report"
	checkReady       = "ready-report"
	checkCLI         = "check-report"
	checkOperator    = "operator-command"
)

var genChecks = []string{checkOverlap, checkTokenBack, checkTokenShared, checkPastLease, checkStateWrite,
	checkAfterStop, checkGap, checkBehind, checkReady, checkCLI, checkOperator}

// genStep is one drawn step of a plan and, once run, its effect window.
type genStep struct {
	kind *genKind
	seed uint64     // the step's own draws (which session, how long)
	rng  *rand.Rand // from seed, when run
	// pause is the wait after the step, drawn with the plan.
	pause time.Duration

	from, to time.Time
	// allowance is what the step adds to the bound of a gap that meets
	// [from, to+allowance], on top of the window's length (the fault's
	// duration).
	allowance time.Duration
	// outage: the step's window is an outage for every session (a fault
	// or an action; set by the data kinds that stop the fleet), so it
	// counts into the bound of a gap that meets it. A planted bad key or
	// a load is no outage for the sessions it does not touch.
	outage bool
	// stall: the step's window counts only for gaps that began before it
	// (memory pressure: nothing new is acquired, but a holder keeps
	// polling).
	stall bool
	// load: the due/achieved ratio applies to gaps of these sessions in
	// the window (nil: none).
	load  map[string]bool
	ratio float64
	note  string
}

// genPlan draws an iteration's plan from its seed: the same seed and kinds
// draw the same steps with the same parameters.
func genPlan(seed uint64, kinds []*genKind, steps int) []*genStep {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	plan := make([]*genStep, steps)
	for i := range plan {
		plan[i] = &genStep{kind: kinds[rng.IntN(len(kinds))], seed: rng.Uint64(),
			pause: time.Duration(100+rng.IntN(700)) * time.Millisecond}
	}
	return plan
}

// planString is the plan as the log prints it.
func planString(plan []*genStep) string {
	names := make([]string, len(plan))
	for i, st := range plan {
		names[i] = st.kind.name
	}
	return strings.Join(names, " → ")
}

// selectKinds reads POLLWORKER_CHAOS_KINDS: empty for the default set
// (quick: the kinds marked quick; long: every kind), "all", or a comma
// list of kind names, class names (action, fault, data, load), "default"
// and "all", and -name or -class to take one out of what the list has so
// far (a list that starts with a "-" starts from the default set).
func selectKinds(spec string, long bool) ([]*genKind, error) {
	def := func() map[string]bool {
		m := map[string]bool{}
		for _, k := range genKinds {
			if long || k.quick {
				m[k.name] = true
			}
		}
		return m
	}
	var on map[string]bool
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "" || spec == "default":
		on = def()
	case spec == "all":
		on = map[string]bool{}
		for _, k := range genKinds {
			on[k.name] = true
		}
	default:
		on = map[string]bool{}
		if strings.HasPrefix(spec, "-") {
			on = def()
		}
		for _, item := range strings.Split(spec, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, off := strings.CutPrefix(item, "-")
			if name == "default" {
				for k := range def() {
					on[k] = !off
				}
				continue
			}
			matched := false
			for _, k := range genKinds {
				if k.name == name || k.class == name || name == "all" {
					on[k.name] = !off
					matched = true
				}
			}
			if !matched {
				return nil, fmt.Errorf("POLLWORKER_CHAOS_KINDS: no kind or class %q (kinds: %s)", name, kindNames())
			}
		}
	}
	var out []*genKind
	for i := range genKinds {
		if on[genKinds[i].name] {
			out = append(out, &genKinds[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("POLLWORKER_CHAOS_KINDS=%q selects no kind", spec)
	}
	return out, nil
}

func kindNames() string {
	names := make([]string, len(genKinds))
	for i, k := range genKinds {
		names[i] = k.name
	}
	return strings.Join(names, ",")
}

// genViolation is one finding, with what it takes to find it again.
type genViolation struct {
	check, session, detail string
	seed                   uint64
	iteration              int
	step                   string // the last step begun before it ("warm-up" before any)
	kind                   string // that step's kind, "" for none
}

func (v genViolation) String() string {
	return fmt.Sprintf("VIOLATION %s session=%s seed=%d iteration=%d after-step=%s: %s", v.check, v.session, v.seed, v.iteration, v.step, v.detail)
}

// genSession is the model of one session, as the operator last left it.
type genSession struct {
	id, url  string
	interval time.Duration
	paused   bool
	load     bool // a load step's session, on the slow or CPU host
}

// genSpan is a time the session must be polled, with its interval.
type genSpan struct {
	Span
	interval time.Duration
}

// stopMark: no poll of session may start in (from, to) (to zero: the
// end), from being genStopBound after the pause or removal returned; with
// host set, no poll on that host (a re-added session's old definition).
type stopMark struct {
	session, host string
	from, to      time.Time
	how           string
}

// exemptWindow: gaps of session meeting [from, to] are not held to a
// bound (planted bad data on that session; to zero: the end).
type exemptWindow struct {
	session  string
	from, to time.Time
}

// genWorld is one iteration's world and the model the checks compare its
// log with.
type genWorld struct {
	t         *testing.T
	seed      uint64
	iteration int
	rng       *rand.Rand // the world's own draws (fencing counters)
	slack     time.Duration
	rds       *redistest.Server
	admin     *redis.Client
	rec       *recorder // the sessions' host
	rec2      *recorder // the host of a session re-added with a new definition
	slow      *recorder // the host-limit load's host
	cpu       *recorder // the CPU load's host
	watch     *stateWatch
	flags     []string
	workers   map[string]lossWorker
	cordoned  map[string]bool
	stopped   map[string]bool // SIGSTOPped now
	seq       int

	sessions map[string]*genSession
	open     map[string]genSpan // session -> its open span
	spans    []genSpan
	stops    []stopMark
	exempt   []exemptWindow
	limits   []limitWindow
	steps    []*genStep
	// effects are what operator repairs cost after their step (a deleted
	// loss marker), counted in gap bounds like steps.
	effects []*genStep
	// fenceRaised: sessions whose fencing counter the run raised (a
	// huge counter), from when: their holder's polls below it are not
	// past their lease.
	fenceRaised map[string]time.Time
	// loaded: the load steps, from their sessions' apply to a second after
	// their prune returned: the recorders are starved or full by design,
	// so a request a worker gave up on (its timeout, min(interval,
	// --poll-timeout)) may be served after the session moved on.
	loaded []timeWindow
	// abandonedLate counts the polls past their lease that this limit
	// excused (abandonedServedLate).
	abandonedLate int
	// planted: bad data left in Redis at the end, which `check` may
	// rightly report.
	planted []string
	repairs []repair

	violations []genViolation
}

func (w *genWorld) logf(format string, args ...any) {
	w.t.Helper()
	w.t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// violate records a finding of the step running now; the iteration goes
// on.
func (w *genWorld) violate(check, sessionID, format string, args ...any) {
	w.violateAt(time.Now(), check, sessionID, format, args...)
}

// violateAt records a finding at, of the last step begun before at.
func (w *genWorld) violateAt(at time.Time, check, sessionID, format string, args ...any) {
	v := genViolation{check: check, session: sessionID, detail: fmt.Sprintf(format, args...),
		seed: w.seed, iteration: w.iteration, step: "warm-up"}
	for i, st := range w.steps {
		if !st.from.After(at) {
			v.step, v.kind = fmt.Sprintf("%d:%s", i, st.kind.name), st.kind.name
		}
	}
	w.violations = append(w.violations, v)
	if n := countCheck(w.violations, check); n <= genLogPerCheck {
		w.logf("%s", v)
	} else if n == genLogPerCheck+1 {
		w.logf("(more %s violations in this iteration: see its summary)", check)
	}
}

// genLogPerCheck: how many violations of one check an iteration logs one
// by one; its summary counts the rest.
const genLogPerCheck = 5

// countCheck counts the violations of check in vs.
func countCheck(vs []genViolation, check string) int {
	n := 0
	for _, v := range vs {
		if v.check == check {
			n++
		}
	}
	return n
}

// violationSummary lists vs, at most genLogPerCheck of each check and then
// how many more and which sessions.
func violationSummary(vs []genViolation) string {
	var b strings.Builder
	more := map[string][]string{}
	for _, v := range vs {
		if countUpTo(vs, v) <= genLogPerCheck {
			b.WriteString("\n" + v.String())
			continue
		}
		more[v.check] = append(more[v.check], v.session)
	}
	for _, c := range genChecks {
		if ids := more[c]; len(ids) > 0 {
			fmt.Fprintf(&b, "\n... and %d more %s violations, sessions %s", len(ids), c, strings.Join(ids[:min(len(ids), 20)], " "))
			if len(ids) > 20 {
				b.WriteString(" …")
			}
		}
	}
	return b.String()
}

// countUpTo counts the violations of v's check in vs up to and including
// v.
func countUpTo(vs []genViolation, v genViolation) int {
	n := 0
	for _, u := range vs {
		if u.check == v.check {
			n++
		}
		if u == v {
			break
		}
	}
	return n
}

func newGenWorld(t *testing.T, seed uint64, iteration int, rng *rand.Rand, slack time.Duration) *genWorld {
	t.Helper()
	w := &genWorld{t: t, seed: seed, iteration: iteration, rng: rng, slack: slack, workers: map[string]lossWorker{},
		cordoned: map[string]bool{}, stopped: map[string]bool{}, sessions: map[string]*genSession{},
		open: map[string]genSpan{}, fenceRaised: map[string]time.Time{}}
	w.flags = append(append([]string(nil), chaosFlags...), "--max-per-host", strconv.Itoa(genMaxPerHost))
	w.rds = redistest.Start(t)
	w.admin = redistest.Client(t, w.rds.URL())
	markFresh(t, w.admin)
	w.watch = startStateWatch(t, w.rds.Addr())
	fence := quickClient(t, w.rds.Addr())
	w.rec = newRecorder(t, fence, pollHold, false)
	w.rec.etags.Store(true) // a state save at every poll, for the state check
	w.rec2 = newRecorder(t, fence, pollHold, false)
	w.rec2.etags.Store(true)
	w.slow = newRecorder(t, nil, genLoadHold, false)
	w.cpu = newRecorder(t, nil, 0, false)
	for range genSessions {
		id := w.newID()
		// A counter that has run for a while: a reset shows as a token
		// going back instead of hiding behind token 1 issued twice.
		require.NoError(t, w.admin.HSet(context.Background(), keyspace.Space{}.Fencing(id), keyspace.FieldToken, 1+rng.IntN(1000)).Err())
		w.sessions[id] = &genSession{id: id, url: w.rec.URL + "/" + id, interval: chaosInterval}
	}
	w.apply(w.file(nil, false), false)
	for range genWorkers {
		w.startWorker("")
	}
	return w
}

func (w *genWorld) newID() string {
	w.seq++
	return "s" + strconv.Itoa(w.seq)
}

// startWorker runs a worker (id "": the next wN) with its HTTP server on a
// free loopback port.
func (w *genWorld) startWorker(id string) string {
	w.t.Helper()
	if id == "" {
		w.seq++
		id = "w" + strconv.Itoa(w.seq)
	}
	addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(w.t))
	wk := startWorker(w.t, w.rds.URL(), id, append(append([]string(nil), w.flags...), "--http-addr", addr)...)
	w.workers[id] = lossWorker{worker: wk, base: "http://" + addr}
	return id
}

// cli runs a pollworker command against the world's Redis and returns its
// output and exit status (-1 when it did not run).
func (w *genWorld) cli(args ...string) (string, int) {
	w.t.Helper()
	full := append([]string{args[0], "--redis-url", w.rds.URL()}, args[1:]...)
	out, err := pollworker(w.t, full...)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &exit):
		return out, exit.ExitCode()
	default:
		return out + err.Error(), -1
	}
}

// operator runs an operator's command that must succeed; a failure is an
// operator-command violation. It returns when the command returned.
func (w *genWorld) operator(args ...string) (ok bool, start, returned time.Time) {
	w.t.Helper()
	start = time.Now()
	out, code := w.cli(args...)
	returned = time.Now()
	if code != 0 {
		w.violate(checkOperator, "-", "pollworker %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(out))
		return false, start, returned
	}
	return true, start, returned
}

// file renders the model's sessions (without those in skip) as a sessions
// file; withPaused writes every entry's paused state.
func (w *genWorld) file(skip map[string]bool, withPaused bool) string {
	var b strings.Builder
	b.WriteString("sessions:\n")
	for _, id := range w.ids(func(*genSession) bool { return true }) {
		s := w.sessions[id]
		if skip[id] {
			continue
		}
		fmt.Fprintf(&b, "  - id: %s\n    url: %s\n    interval: %s\n", s.id, s.url, s.interval)
		if withPaused {
			fmt.Fprintf(&b, "    paused: %v\n", s.paused)
		}
	}
	return b.String()
}

// apply runs `sessions apply -f` (with --prune) of content and returns
// when it was started and when it returned.
func (w *genWorld) apply(content string, prune bool) (bool, time.Time, time.Time) {
	w.t.Helper()
	path := filepath.Join(w.t.TempDir(), "sessions.yaml")
	require.NoError(w.t, os.WriteFile(path, []byte(content), 0o600))
	args := []string{"sessions", "apply", "-f", path}
	if prune {
		args = append(args, "--prune", "--allow-empty")
	}
	return w.operator(args...)
}

// ids lists the modelled sessions for which keep holds, sorted.
func (w *genWorld) ids(keep func(*genSession) bool) []string {
	var out []string
	for id, s := range w.sessions {
		if keep(s) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func active(s *genSession) bool { return !s.paused && !s.load }
func paused(s *genSession) bool { return s.paused && !s.load }

// pickSession draws one of ids, "" when there is none.
func pickSession(rng *rand.Rand, ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ids[rng.IntN(len(ids))]
}

// openSpan starts the session's span at from.
func (w *genWorld) openSpan(id string, from time.Time) {
	w.open[id] = genSpan{Span: Span{Session: id, From: from}, interval: w.sessions[id].interval}
}

// closeSpan ends the session's open span at to, if it has one.
func (w *genWorld) closeSpan(id string, to time.Time) {
	if sp, ok := w.open[id]; ok {
		sp.To = to
		w.spans = append(w.spans, sp)
		delete(w.open, id)
	}
}

// stop records that id was paused or removed by a command that returned at
// returned: its span ends when the command started (a poll after that is
// not owed), and no poll may start later than genStopBound after returned.
func (w *genWorld) stop(id, how string, start, returned time.Time) {
	w.closeSpan(id, start)
	w.stops = append(w.stops, stopMark{session: id, from: returned.Add(genStopBound), how: how})
}

// restart ends the stop marks of id: it is polled again from at (the start
// of the command that resumed or re-added it).
func (w *genWorld) restart(id string, at time.Time) {
	for i := range w.stops {
		m := &w.stops[i]
		if m.session == id && m.to.IsZero() && (m.host == "" || strings.HasPrefix(w.sessions[id].url, m.host+"/")) {
			m.to = at
		}
	}
	w.openSpan(id, at)
}

// polledSince returns the sessions of the sessions' hosts polled at or
// after t.
func (w *genWorld) polledSince(t time.Time) map[string]bool {
	got := w.rec.polledSince(t, nil)
	for id := range w.rec2.polledSince(t, nil) {
		got[id] = true
	}
	return got
}

// --- operator actions ---

func (w *genWorld) doAdd(st *genStep) {
	id := w.newID()
	w.sessions[id] = &genSession{id: id, url: w.rec.URL + "/" + id, interval: chaosInterval}
	ok, start, _ := w.operator("sessions", "add", "--id", id, "--url", w.sessions[id].url, "--interval", chaosInterval.String())
	if !ok {
		delete(w.sessions, id)
		return
	}
	w.openSpan(id, start)
	st.note = id
}

func (w *genWorld) doPause(st *genStep) {
	ids := w.ids(active)
	if len(ids) <= 2 {
		return
	}
	n := 1 + st.rng.IntN(len(ids)/2)
	st.rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
	ids = ids[:n]
	sort.Strings(ids)
	ok, start, returned := w.operator(append([]string{"sessions", "pause"}, ids...)...)
	if !ok {
		return
	}
	for _, id := range ids {
		w.sessions[id].paused = true
		w.stop(id, "pause", start, returned)
	}
	st.note = strings.Join(ids, " ")
}

func (w *genWorld) doResume(st *genStep) {
	id := pickSession(st.rng, w.ids(paused))
	if id == "" {
		return
	}
	ok, start, _ := w.operator("sessions", "resume", id)
	if !ok {
		return
	}
	w.sessions[id].paused = false
	w.restart(id, start)
	st.note = id
}

func (w *genWorld) doRemove(st *genStep) {
	ids := w.ids(func(s *genSession) bool { return !s.load })
	if len(w.ids(active)) <= 2 {
		return
	}
	id := pickSession(st.rng, ids)
	ok, start, returned := w.operator("sessions", "rm", id)
	if !ok {
		return
	}
	delete(w.sessions, id)
	w.stop(id, "rm", start, returned)
	st.note = id
}

// doApply applies a file that changes the interval of one or two sessions
// and adds one.
func (w *genWorld) doApply(st *genStep) {
	ids := w.ids(func(s *genSession) bool { return !s.load })
	changed := map[string]time.Duration{}
	for range 1 + st.rng.IntN(2) {
		if id := pickSession(st.rng, ids); id != "" {
			changed[id] = []time.Duration{chaosInterval, 2 * chaosInterval}[st.rng.IntN(2)]
		}
	}
	id := w.newID()
	w.sessions[id] = &genSession{id: id, url: w.rec.URL + "/" + id, interval: chaosInterval}
	old := map[string]time.Duration{}
	for cid, ivl := range changed {
		old[cid], w.sessions[cid].interval = w.sessions[cid].interval, ivl
	}
	ok, start, _ := w.apply(w.file(nil, false), false)
	if !ok {
		delete(w.sessions, id)
		for cid, ivl := range old {
			w.sessions[cid].interval = ivl
		}
		return
	}
	w.openSpan(id, start)
	for cid, ivl := range changed {
		// The span's bound takes the longer interval: a gap across the
		// apply may be one of the old interval and one of the new.
		if sp, open := w.open[cid]; open {
			sp.interval = max(sp.interval, ivl)
			w.open[cid] = sp
		}
	}
	st.note = fmt.Sprintf("+%s, intervals %v", id, changed)
}

func (w *genWorld) doApplyPrune(st *genStep) {
	ids := w.ids(func(s *genSession) bool { return !s.load })
	if len(w.ids(active)) <= 3 {
		return
	}
	st.rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
	gone := map[string]bool{}
	for _, id := range ids[:1+st.rng.IntN(min(3, len(ids)-3))] {
		gone[id] = true
	}
	ok, start, returned := w.apply(w.file(gone, false), true)
	if !ok {
		return
	}
	var names []string
	for id := range gone {
		delete(w.sessions, id)
		w.stop(id, "apply --prune", start, returned)
		names = append(names, id)
	}
	sort.Strings(names)
	st.note = strings.Join(names, " ")
}

// doReAdd removes a session and, a moment later, adds one of the same id
// with another URL and interval (issue 22 item 2).
func (w *genWorld) doReAdd(st *genStep) {
	id := pickSession(st.rng, w.ids(func(s *genSession) bool { return !s.load }))
	if id == "" {
		return
	}
	ok, start, returned := w.operator("sessions", "rm", id)
	if !ok {
		return
	}
	old := w.sessions[id]
	delete(w.sessions, id)
	w.stop(id, "rm (re-add)", start, returned)
	hold(time.Duration(st.rng.IntN(1500)) * time.Millisecond)
	ivl := chaosInterval
	if old.interval == chaosInterval {
		ivl = 2 * chaosInterval
	}
	// The new definition polls another host, so that a poll of the old
	// one shows.
	oldHost, newHost := w.rec, w.rec2
	if strings.HasPrefix(old.url, w.rec2.URL+"/") {
		oldHost, newHost = w.rec2, w.rec
	}
	s := &genSession{id: id, url: newHost.URL + "/" + id, interval: ivl}
	ok, start, _ = w.operator("sessions", "add", "--id", id, "--url", s.url, "--interval", ivl.String())
	if !ok {
		return
	}
	w.sessions[id] = s
	w.restart(id, start)
	w.stops = append(w.stops, stopMark{session: id, host: oldHost.URL, from: later(start, returned.Add(genStopBound)), how: "rm and add of a new definition (its old URL)"})
	st.note = fmt.Sprintf("%s interval %v on %s", id, ivl, newHost.URL)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// uncordonedLive lists the live workers that are neither cordoned nor
// stopped.
func (w *genWorld) uncordonedLive() []string {
	var out []string
	for id := range w.workers {
		if !w.cordoned[id] && !w.stopped[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (w *genWorld) doDrain(st *genStep) {
	ids := w.uncordonedLive()
	if len(ids) < 2 {
		return
	}
	id := pickSession(st.rng, ids)
	w.waitListed(id, genFailover)
	if ok, _, _ := w.operator("drain", id); ok {
		w.cordoned[id] = true
		st.note = id
	}
	st.allowance = genHandoff
}

// waitListed waits, up to within, until the live workers Redis lists
// include id. A worker is briefly not listed after its registration was
// lost (its node key planted then deleted by bad-node-type, Redis lost
// data) until its next claim writes it again, and `drain` rightly refuses
// a worker that is not listed (seed 20261130 iteration 375: drain 240 ms
// after bad-node-type on the same worker); an operator would drain it
// once it is listed again. A worker not listed again within the bound
// leaves the drain to fail: an operator-command violation.
func (w *genWorld) waitListed(id string, within time.Duration) {
	w.t.Helper()
	r, err := nodes.NewReader(w.admin, keyspace.Space{}, nil)
	require.NoError(w.t, err)
	deadline := time.Now().Add(within)
	for {
		m, err := r.Members(context.Background())
		if (err == nil && m.Contains(id)) || !time.Now().Before(deadline) {
			return
		}
		hold(50 * time.Millisecond)
	}
}

func (w *genWorld) doUncordon(st *genStep) {
	var ids []string
	for id := range w.cordoned {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	id := pickSession(st.rng, ids)
	if id == "" {
		return
	}
	if ok, _, _ := w.operator("uncordon", id); ok {
		delete(w.cordoned, id)
		st.note = id
	}
	st.allowance = genHandoff
}

// killWorker kill -9s a live worker (keeping one uncordoned worker) and
// returns its id, "" when none may go.
func (w *genWorld) killWorker(st *genStep) string {
	ids := w.uncordonedLive()
	if len(ids) < 2 {
		return ""
	}
	id := pickSession(st.rng, ids)
	wk := w.workers[id]
	wk.signal(w.t, syscall.SIGKILL)
	_ = wk.wait(w.t, 10*time.Second)
	delete(w.workers, id)
	delete(w.cordoned, id)
	return id
}

// doForget kill -9s a worker and forgets it once its heartbeat is old
// enough (forget refuses before), then starts a new one if the fleet is
// small.
func (w *genWorld) doForget(st *genStep) {
	st.allowance = genFailover
	id := w.killWorker(st)
	if id == "" {
		return
	}
	deadline := time.Now().Add(10 * genHeartbeat)
	var out string
	code := -1
	assertEventually(time.Until(deadline), func() bool {
		out, code = w.cli("forget", id)
		return code == 0
	})
	if code != 0 {
		w.violate(checkOperator, "-", "forget %s of a worker killed %v ago: exit %d: %s", id, 10*genHeartbeat, code, strings.TrimSpace(out))
	}
	if len(w.workers) < genWorkers {
		st.note = fmt.Sprintf("%s, then %s joins", id, w.startWorker(""))
	} else {
		st.note = id
	}
}

// --- faults ---

func (w *genWorld) doKill(st *genStep) {
	st.allowance = genFailover
	if id := w.killWorker(st); id != "" {
		st.note = fmt.Sprintf("%s, then %s joins", id, w.startWorker(""))
	}
}

func (w *genWorld) doStop(st *genStep) {
	ids := w.uncordonedLive()
	if len(ids) < 2 {
		return
	}
	id := pickSession(st.rng, ids)
	d := time.Duration(200+st.rng.IntN(int(2*chaosTTL/time.Millisecond))) * time.Millisecond
	wk := w.workers[id]
	w.stopped[id] = true
	wk.signal(w.t, syscall.SIGSTOP)
	hold(d)
	wk.signal(w.t, syscall.SIGCONT)
	delete(w.stopped, id)
	now := time.Now()
	// A poll started before the pause and delivered after it: the limit
	// the README lists (see TestChaos).
	w.limits = append(w.limits, limitWindow{id, now, now.Add(pollHold + 200*time.Millisecond)})
	st.allowance = genFailover
	st.note = fmt.Sprintf("%s for %v", id, d)
}

func (w *genWorld) doRestart(st *genStep) {
	ids := w.uncordonedLive()
	if len(ids) < 2 {
		return
	}
	id := pickSession(st.rng, ids)
	wk := w.workers[id]
	wk.signal(w.t, syscall.SIGTERM)
	_ = wk.wait(w.t, 20*time.Second)
	delete(w.workers, id)
	w.startWorker(id)
	st.allowance = genHandoff + genFailover
	st.note = id
}

// lost records that Redis lost every key and puts the sessions back as an
// operator with a copy would (sessions apply of the model, paused states
// included): Redis also forgot the cordons.
func (w *genWorld) lost(st *genStep) {
	clear(w.cordoned)
	w.apply(w.file(nil, true), false)
	st.allowance = genLoss
	st.note = "the operator applies the sessions again"
}

func (w *genWorld) doRedisRestartPersisted(st *genStep) {
	// SHUTDOWN SAVE writes every acknowledged write before it exits.
	_ = w.admin.Do(context.Background(), "SHUTDOWN", "SAVE").Err()
	w.rds.Restart()
	st.allowance = genLoss
	st.note = "SHUTDOWN SAVE, started again on its dump"
}

func (w *genWorld) doRedisRestartEmpty(st *genStep) {
	w.rds.Stop()
	_ = os.Remove(filepath.Join(w.rds.Dir, "dump.rdb"))
	w.rds.Restart()
	w.lost(st)
}

func (w *genWorld) doFlushAll(st *genStep) {
	require.NoError(w.t, w.admin.FlushAll(context.Background()).Err())
	w.lost(st)
}

// doMemoryPressure sets maxmemory to 1 byte (every allocating write fails)
// or just above the memory in use, for 1-4 s. The README promises that
// holders keep polling: only gaps that began before it may last through it.
func (w *genWorld) doMemoryPressure(st *genStep) {
	ctx := context.Background()
	limit := "1"
	if st.rng.IntN(2) == 0 {
		info, _ := w.admin.Info(ctx, "memory").Result()
		if u := infoField(info, "used_memory"); u > 0 {
			limit = strconv.FormatInt(u+256*1024, 10)
		}
	}
	d := time.Duration(1000+st.rng.IntN(3000)) * time.Millisecond
	require.NoError(w.t, w.admin.ConfigSet(ctx, "maxmemory", limit).Err())
	notReady := map[string]bool{}
	w.sample(d, func(id string, wk lossWorker) {
		if ready, err := wk.ready(); err == nil && !ready {
			notReady[id] = true
		}
	})
	require.NoError(w.t, w.admin.ConfigSet(ctx, "maxmemory", "0").Err())
	st.stall = true
	st.note = fmt.Sprintf("maxmemory %s for %v; not ready: %v", limit, d, sortedSet(notReady))
	// The README: a full Redis refuses the heartbeat, and the workers
	// report not ready (a heartbeat every 300 ms: within a second).
	if limit == "1" && d >= 2*time.Second && len(notReady) == 0 {
		w.violate(checkReady, "-", "maxmemory 1 for %v and no worker said not ready (/readyz)", d)
	}
}

// sample calls fn for every worker every 250 ms for d.
func (w *genWorld) sample(d time.Duration, fn func(id string, wk lossWorker)) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for id, wk := range w.workers {
			fn(id, wk)
		}
		hold(min(250*time.Millisecond, max(time.Until(end), 0)))
	}
}

// sortedSet lists the keys of m, sorted.
func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// infoField reads an integer field of an INFO answer, 0 when absent.
func infoField(info, name string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func (w *genWorld) doClientKill(st *genStep) {
	typ := []string{"normal", "pubsub"}[st.rng.IntN(2)]
	n, err := w.admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").Int64()
	require.NoError(w.t, err)
	st.allowance = genFailover
	st.note = fmt.Sprintf("type %s: %d connections", typ, n)
}

func (w *genWorld) doScriptFlush(st *genStep) {
	require.NoError(w.t, w.admin.ScriptFlush(context.Background()).Err())
	st.allowance = genRenew
}

// --- planted bad data ---

// plantSessionKey makes a session's lease, fencing counter or state key a
// hash (the state, half the time, a garbage string), expects `check` to
// name the session, then repairs it as an operator would (DEL). The
// session's gaps are exempt from plant to repair plus what the repair
// costs; every other session keeps its bound (issue 22 items 6 and 8).
func plantSessionKey(which string) func(*genWorld, *genStep) {
	return func(w *genWorld, st *genStep) {
		ctx := context.Background()
		id := pickSession(st.rng, w.ids(active))
		if id == "" {
			return
		}
		keys := keyspace.Space{}
		key, repairCost := keys.Lease(id), genFailover
		switch which {
		case "fence":
			key, repairCost = keys.Fencing(id), genLoss
		case "state":
			key = keys.State(id)
		}
		plantAt := time.Now()
		how := plantHash
		if which == "fence" {
			how = plantString // the fencing record is a hash: a string is of the wrong type
		}
		if which == "state" {
			// A garbage string or a hash with garbage fields (issue 22
			// item 8).
			how = []plantHow{plantString, plantStateFields}[st.rng.IntN(2)]
		}
		w.plant(ctx, key, how)
		// A corrupt state reads as never saved (the README): its session
		// keeps its bound; a bad lease or counter may stop its own.
		ex := len(w.exempt)
		if which != "state" {
			w.exempt = append(w.exempt, exemptWindow{session: id, from: plantAt})
		}
		hold(time.Duration(1000+st.rng.IntN(2000)) * time.Millisecond)
		if !w.expectCheckNames(key, id) {
			st.note = "overwritten by the workers; "
		}
		// The bad key stays for the next 0-2 steps (a kill or a handoff
		// meets it there), then the operator deletes it.
		after := len(w.steps) - 1 + st.rng.IntN(3)
		w.repairs = append(w.repairs, repair{afterStep: after, run: func() {
			w.unplant(key)
			if which != "state" {
				w.exempt[ex].to = time.Now().Add(repairCost)
			}
		}})
		st.note += fmt.Sprintf("%s, deleted after step %d if still planted", key, after)
	}
}

// repair is an operator's repair of planted data, run after a later step.
type repair struct {
	afterStep int
	run       func()
}

// runRepairs runs the repairs due after step i (all with i < 0).
func (w *genWorld) runRepairs(i int) {
	kept := w.repairs[:0]
	for _, r := range w.repairs {
		if i < 0 || r.afterStep <= i {
			r.run()
		} else {
			kept = append(kept, r)
		}
	}
	w.repairs = kept
}

// plantedScript tells whether a key still holds what plant wrote (1) and,
// with ARGV[2] "del", deletes it then: after a data loss or a repair by
// the workers the key may be a real lease or state again, which a DEL
// would break. A state save writes its fields over a planted hash (the
// field "planted" stays): a token other than the planted one means saved.
var plantedScript = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1]).ok
local tok = t == 'hash' and redis.call('HGET', KEYS[1], 'token')
if (t == 'hash' and redis.call('HGET', KEYS[1], 'planted') and (not tok or tok == ARGV[3])) or (t == 'string' and redis.call('GET', KEYS[1]) == ARGV[1]) then
  if ARGV[2] == 'del' then redis.call('DEL', KEYS[1]) end
  return 1
end
return 0`)

// stillPlanted reports whether key still holds what plant wrote.
func (w *genWorld) stillPlanted(key string) bool {
	w.t.Helper()
	n, err := plantedScript.Run(context.Background(), w.admin, []string{key}, plantedGarbage, "", plantedToken).Int()
	require.NoError(w.t, err)
	return n == 1
}

// plantedGarbage is the garbage string plant writes, plantedToken the
// garbage token of a planted state hash.
const (
	plantedGarbage = "garbage \x00\xff{"
	plantedToken   = "x1"
)

// unplant deletes key if it still holds what plant wrote.
func (w *genWorld) unplant(key string) {
	w.t.Helper()
	require.NoError(w.t, plantedScript.Run(context.Background(), w.admin, []string{key}, plantedGarbage, "del", plantedToken).Err())
}

// plantHow is what plant writes.
type plantHow int

const (
	plantHash        plantHow = iota // a hash of one field: a key of the wrong type
	plantString                      // plantedGarbage: a garbage string
	plantStateFields                 // a hash with a state's fields, garbage
)

// plant replaces what key held with bad data; every form keeps a mark
// (the field "planted", or the garbage string) that stillPlanted reads.
func (w *genWorld) plant(ctx context.Context, key string, how plantHow) {
	w.t.Helper()
	_, err := w.admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		switch how {
		case plantString:
			p.Set(ctx, key, plantedGarbage, 0)
		case plantStateFields:
			p.HSet(ctx, key, "planted", "by the chaos generator", "data", "\xff{", "token", plantedToken, "saved", "-garbage")
		default:
			p.HSet(ctx, key, "planted", "by the chaos generator")
		}
		return nil
	})
	require.NoError(w.t, err)
}

// expectCheckNames runs `pollworker check` while bad data is planted: it
// must fail and name the key or the session (the worker's own report
// agreeing with what happened). A key the workers overwrote before or
// while check ran (a corrupt state, at the next save) is not expected;
// it returns whether the key was planted throughout.
func (w *genWorld) expectCheckNames(key string, names ...string) bool {
	if !w.stillPlanted(key) {
		return false
	}
	out, code := w.cli("check", "--grace", "0s")
	if !w.stillPlanted(key) {
		return false
	}
	named := strings.Contains(out, key)
	for _, n := range names {
		// The name as a word: s1 is not named by s10.
		named = named || regexp.MustCompile(`(^|[^\w])`+regexp.QuoteMeta(n)+`($|[^\w])`).MatchString(out)
	}
	if code == 0 || !named {
		w.violate(checkCLI, strings.Join(names, ","), "check with %s planted: exit %d, names it: %v: %s", key, code, named, firstLines(out, 6))
	}
	return true
}

// firstLines keeps the first n lines of s, for a violation's detail.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " | ")
}

// doBadMarker makes the loss marker (slot 0's, the one outside Cluster) a
// hash. The workers repair it when they next acquire (a kill or a handoff
// in the next steps makes them), or report it; if it is still a hash 0-2
// steps later, the operator deletes it, which reads as a loss: every
// session's gap may then take a loss recovery.
func (w *genWorld) doBadMarker(st *genStep) {
	ctx := context.Background()
	key := keyspace.Space{}.Epoch(0)
	w.plant(ctx, key, plantHash)
	hold(time.Duration(1000+st.rng.IntN(2000)) * time.Millisecond)
	after := len(w.steps) - 1 + st.rng.IntN(3)
	w.repairs = append(w.repairs, repair{afterStep: after, run: func() {
		if typ, _ := w.admin.Type(ctx, key).Result(); typ == "hash" {
			now := time.Now()
			w.unplant(key)
			w.effects = append(w.effects, &genStep{kind: st.kind, from: now, to: time.Now(), allowance: genLoss, outage: true})
			w.logf("the operator deleted the loss marker, still a hash after step %d", after)
		}
	}})
	typ, _ := w.admin.Type(ctx, key).Result()
	st.allowance, st.outage = genLoss, true
	st.note = "a " + typ + " at the step's end"
}

// doBadHighWater makes the token high-water mark (slot 0's, the one
// outside Cluster) unusable for 0.5-2 s: a hash, a string that is not a
// number, or a number at or above 2^53-1. An acquisition reads it as
// missing (tokens rest on the records and the clock, as after its loss),
// reports it and overwrites it: no session may lose its bound, and tokens
// must never go back or be shared. A session is added meanwhile, so that
// a worker acquires while the mark is bad.
func (w *genWorld) doBadHighWater(st *genStep) {
	ctx := context.Background()
	key := keyspace.Space{}.EpochTokens(0)
	switch st.rng.IntN(3) {
	case 0:
		w.plant(ctx, key, plantHash)
		st.note = key + " a hash"
	case 1:
		w.plant(ctx, key, plantString)
		st.note = key + " garbage"
	default:
		v := fmt.Sprint(int64(1)<<53 + st.rng.Int64N(1<<20))
		require.NoError(w.t, w.admin.Set(ctx, key, v, 0).Err())
		st.note = key + " = " + v
	}
	// A session added now makes a worker acquire while the mark is bad.
	note := st.note
	w.doAdd(st)
	st.note = note + ", then " + st.note + " added"
	hold(time.Duration(500+st.rng.IntN(1500)) * time.Millisecond)
	if v, err := w.admin.Get(ctx, key).Int64(); err == nil && v < 1<<53-1 {
		st.note += ", overwritten by an acquisition"
	} else {
		st.note += ", still bad at the step's end"
	}
}

// doBadNode makes a live worker's heartbeat key a hash: at worst that
// worker's sessions fail over.
func (w *genWorld) doBadNode(st *genStep) {
	id := pickSession(st.rng, w.uncordonedLive())
	if id == "" {
		return
	}
	ctx := context.Background()
	key := keyspace.Space{}.Node(id)
	w.plant(ctx, key, plantHash)
	hold(time.Duration(500+st.rng.IntN(1500)) * time.Millisecond)
	w.unplant(key)
	st.allowance, st.outage = genFailover, true
	st.note = key
}

// doHugeFence sets a session's fencing counter at or above 2^53, where a
// Lua double can no longer add one (issue 22 item 7). Tokens must still
// never go back or be shared; the session may be refused (its gaps are
// exempt from then on).
func (w *genWorld) doHugeFence(st *genStep) {
	// Not a session whose fencing counter holds planted data of another
	// type (bad-fence-type earlier in the plan): HSET would be refused
	// (seed 20261130 iteration 206).
	id := pickSession(st.rng, w.ids(func(s *genSession) bool {
		if !active(s) {
			return false
		}
		t, err := w.admin.Type(context.Background(), keyspace.Space{}.Fencing(s.id)).Result()
		return err == nil && (t == "hash" || t == "none")
	}))
	if id == "" {
		return
	}
	v := int64(1)<<53 + int64(st.rng.IntN(3))
	if st.rng.IntN(3) == 0 {
		v = int64(1)<<62 + st.rng.Int64N(1<<40)
	}
	// A poll that arrived just before the SET may read the raised counter
	// (the recorder reads it on arrival, within fenceLookupTimeout).
	// The first raise counts: a second one on the same session must not
	// take back the excuse of the polls between the two.
	if _, ok := w.fenceRaised[id]; !ok {
		w.fenceRaised[id] = time.Now().Add(-2 * fenceLookupTimeout)
	}
	require.NoError(w.t, w.admin.HSet(context.Background(), keyspace.Space{}.Fencing(id), keyspace.FieldToken, v).Err())
	w.exempt = append(w.exempt, exemptWindow{session: id, from: time.Now()})
	w.planted = append(w.planted, keyspace.Space{}.Fencing(id))
	st.note = fmt.Sprintf("%s = %d", id, v)
}

// doJunkMembers adds members to the node index that are no live worker:
// a valid id without a heartbeat, invalid ids, and many short ones (issue
// 22 item 9). No session may lose its poller over them; then the
// operator removes the named ones with forget, which must accept them,
// and the rest (and what forget refused) with ZREM.
func (w *genWorld) doJunkMembers(st *genStep) {
	ctx := context.Background()
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	named := []string{"ghost", "bad id with spaces", "ünï©ødé"}
	members := []redis.Z{{Score: far, Member: ""}}
	for _, m := range named {
		members = append(members, redis.Z{Score: far, Member: m})
	}
	many := 50 + st.rng.IntN(450)
	for i := range many {
		members = append(members, redis.Z{Score: far, Member: "x" + strconv.Itoa(i)})
	}
	idx := keyspace.Space{}.NodeIndex()
	require.NoError(w.t, w.admin.ZAdd(ctx, idx, members...).Err())
	hold(time.Duration(2000+st.rng.IntN(2000)) * time.Millisecond)
	for _, m := range named {
		w.operator("forget", m)
	}
	// What forget refused, and the rest, the operator removes by hand.
	rest := []any{""}
	for _, m := range named {
		rest = append(rest, m)
	}
	for i := range many {
		rest = append(rest, "x"+strconv.Itoa(i))
	}
	require.NoError(w.t, w.admin.ZRem(ctx, idx, rest...).Err())
	st.note = fmt.Sprintf("%d members", len(members))
}

// --- load ---

// doLoadHost adds genLoadCount sessions on the slow host, 2× what the
// per-host limits of the fleet let start, for genLoadFor, then prunes them.
func (w *genWorld) doLoadHost(st *genStep) {
	w.load(st, w.slow, genLoadCount, genLoadIvl, false)
}

// doLoadCPU adds genCPUCount sessions at genCPUIvl on a host that answers
// at once: more polls than the workers' CPU starts; every session of the
// fleet may slow down evenly.
func (w *genWorld) doLoadCPU(st *genStep) {
	w.load(st, w.cpu, genCPUCount, genCPUIvl, true)
}

// load runs a load step: sessions added by one apply, polled for
// genLoadFor while the workers' pollworker_behind is sampled, then pruned
// by one apply --prune. The achieved rate sets the step's due/achieved
// ratio; every worker must say behind when it is at least genBehindRatio.
func (w *genWorld) load(st *genStep, host *recorder, count int, ivl time.Duration, everyone bool) {
	var ids []string
	for range count {
		id := "load-" + w.newID()
		w.sessions[id] = &genSession{id: id, url: host.URL + "/" + id, interval: ivl, load: true}
		ids = append(ids, id)
	}
	ok, start, _ := w.apply(w.file(nil, false), false)
	if !ok {
		for _, id := range ids {
			delete(w.sessions, id)
		}
		return
	}
	st.load = map[string]bool{}
	for _, id := range ids {
		w.openSpan(id, start)
		st.load[id] = true
	}
	if everyone {
		for id := range w.open {
			st.load[id] = true
		}
	}
	behind := map[string]bool{}
	w.sample(genLoadFor, func(id string, wk lossWorker) {
		if m, err := wk.metrics(); err == nil && metricSum(m, "pollworker_behind") > 0 {
			behind[id] = true
		}
	})
	measureTo := time.Now()
	ok, pstart, returned := w.apply(w.file(toSet(ids), false), true)
	w.loaded = append(w.loaded, timeWindow{start, returned.Add(genLoadSettle)})
	for _, id := range ids {
		delete(w.sessions, id)
		if ok {
			w.stop(id, "apply --prune (load)", pstart, returned)
		}
	}
	// due/achieved over the step, from its first second on (the
	// sessions' first polls come as they are seen).
	from := start.Add(time.Second)
	var polls []Poll
	for _, p := range append(host.snapshot(), w.rec.snapshot()...) {
		if st.load[p.Session] && !p.Start.Before(from) && p.Start.Before(measureTo) {
			polls = append(polls, p)
		}
	}
	dueOf := map[string]float64{}
	for id := range st.load {
		dueOf[id] = float64(measureTo.Sub(from)) / float64(w.openInterval(id, ivl))
	}
	due, achieved, worst := loadRatios(dueOf, polls)
	st.ratio = max(1, due/float64(max(achieved, 1)), worst)
	said := sortedSet(behind)
	st.note = fmt.Sprintf("%d sessions at %v: due %.0f, achieved %d (due/achieved %.2f, of the busiest worker %.2f); behind said by %v",
		count, ivl, due, achieved, due/float64(max(achieved, 1)), worst, said)
	if st.ratio >= genBehindRatio && len(said) == 0 {
		w.violate(checkBehind, "-", "due/achieved %.2f for %v and no worker said behind (pollworker_behind)", st.ratio, genLoadFor)
	}
}

// loadRatios returns the due and achieved polls of a load step's sessions
// (dueOf: each session's polls due over the window; polls: the polls in
// it) and the highest due/achieved of one worker, each session counted
// with the worker that polled it last. Each worker slows its own sessions
// evenly (in proportion to their rates); how a host's sessions split between the
// workers is the placement's (rendezvous hashing: with 120 sessions on
// two workers, one may hold 55 % and more), so the bound of a load
// session's gap is that of the busiest worker when it is above the
// fleet's.
func loadRatios(dueOf map[string]float64, polls []Poll) (due float64, achieved int, worst float64) {
	holder := map[string]string{}
	last := map[string]time.Time{}
	done := map[string]int{}
	for _, p := range polls {
		if p.Start.After(last[p.Session]) {
			last[p.Session], holder[p.Session] = p.Start, p.Worker
		}
		done[p.Worker]++
	}
	owed := map[string]float64{}
	for id, d := range dueOf {
		due += d
		if wk, ok := holder[id]; ok {
			owed[wk] += d
		}
	}
	for wk, d := range owed {
		worst = max(worst, d/float64(max(done[wk], 1)))
	}
	return due, len(polls), worst
}

// openInterval is the interval of id's span, def when it has none.
func (w *genWorld) openInterval(id string, def time.Duration) time.Duration {
	if sp, ok := w.open[id]; ok {
		return sp.interval
	}
	return def
}

func toSet(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// ready reads the worker's /readyz: whether it answers 200.
func (w lossWorker) ready() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"/readyz", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// metricSum adds the samples of a metric over its labels.
func metricSum(m map[string]float64, name string) float64 {
	var sum float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}

// --- the iteration ---

// genOutcome is one iteration's result for the table.
type genOutcome struct {
	kinds      map[string]int // kind -> steps
	violations []genViolation
	polls      int
	maxGap     time.Duration
}

// runIteration runs one plan and checks the history.
func runIteration(t *testing.T, seed uint64, iteration int, iterSeed uint64, plan []*genStep, slack time.Duration) genOutcome {
	w := newGenWorld(t, seed, iteration, rand.New(rand.NewPCG(iterSeed, 1)), slack)
	t0 := time.Now()
	if !assertEventually(20*time.Second, func() bool { return len(w.polledSince(t0)) >= genSessions }) {
		w.violate(checkGap, "-", "warm-up: not every session polled within 20s")
	}
	// The spans start once every session was polled: the start of the
	// workers is not under test.
	warm := time.Now()
	for id := range w.sessions {
		w.openSpan(id, warm)
	}
	hold(500 * time.Millisecond)
	for i, st := range plan {
		st.rng = rand.New(rand.NewPCG(st.seed, 2))
		st.from = time.Now()
		st.outage = st.kind.class == classFault || st.kind.class == classAction
		w.steps = append(w.steps, st)
		st.kind.run(w, st)
		st.to = time.Now()
		if st.note == "" {
			st.note = "(nothing to do)"
		}
		w.logf("step %d:%s %s (%v)", i, st.kind.name, st.note, st.to.Sub(st.from).Round(time.Millisecond))
		w.runRepairs(i)
		hold(st.pause)
	}
	w.runRepairs(-1)
	w.settle()
	return w.check(t0)
}

// settle waits until every active session was polled after the last
// step's bound, then until no worker says behind and `check` passes, each
// within recoveryWait (the workers' own reports agreeing, once the faults
// are over).
func (w *genWorld) settle() {
	last := w.steps[len(w.steps)-1]
	since := last.to
	missing := []string{}
	assertEventually(recoveryWait, func() bool {
		got := w.polledSince(since)
		missing = missing[:0]
		for id := range w.open {
			if !got[id] && !w.exempted(id, time.Now(), time.Now()) {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	})
	hold(time.Second)
	if need, placeable := w.baseNeed(); need > genRoom*float64(placeable) {
		// The active sessions need more host slots than the workers left
		// (drained or stopped) have: behind is the right report.
		w.logf("behind not checked: the sessions need %.2f workers' host slots, %d placeable", need, placeable)
		return
	}
	var behind []string
	if !assertEventually(recoveryWait, func() bool {
		behind = behind[:0]
		for id, wk := range w.workers {
			if m, err := wk.metrics(); err == nil && metricSum(m, "pollworker_behind") > 0 {
				behind = append(behind, id)
			}
		}
		return len(behind) == 0
	}) {
		sort.Strings(behind)
		var why []string
		for _, id := range behind {
			if m, err := w.workers[id].metrics(); err == nil {
				why = append(why, fmt.Sprintf("%s: %s", id, behindMetrics(m)))
			}
		}
		w.violate(checkBehind, "-", "%v still say behind %v after the last step, with no load (%s)", behind, recoveryWait, strings.Join(why, "; "))
	}
	if len(w.planted) > 0 {
		return // check may rightly report what is left planted
	}
	var out string
	code := 0
	if !assertEventually(recoveryWait, func() bool {
		out, code = w.cli("check", "--grace", (2 * chaosDiscovery).String())
		return code == 0
	}) {
		w.violate(checkCLI, "-", "check still fails %v after the last step: exit %d: %s", recoveryWait, code, firstLines(out, 8))
	}
}

// behindMetrics lists a worker's figures of being behind, for a report:
// every pollworker_behind*, pollworker_polls_* gauge and the held count.
func behindMetrics(m map[string]float64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.HasPrefix(k, "pollworker_behind") || strings.HasPrefix(k, "pollworker_polls_") && !strings.Contains(k, "_total") ||
			strings.HasPrefix(k, "pollworker_sessions_held") {
			out = append(out, fmt.Sprintf("%s=%g", k, m[k]))
		}
	}
	return strings.Join(out, " ")
}

// pollsAround lists, for a gap report, the three polls of a session
// before a (or at it) and the one after b: start (from t0), worker and
// token, so that a gap says whether it was a handoff, a stop or a queue.
func pollsAround(polls []Poll, a, b time.Time, t0 time.Time) string {
	var before []Poll
	var after *Poll
	for i, p := range polls {
		if !p.Start.After(a) {
			before = append(before, p)
		} else if !p.Start.Before(b) && after == nil {
			after = &polls[i]
		}
	}
	if len(before) > 3 {
		before = before[len(before)-3:]
	}
	var parts []string
	for _, p := range before {
		parts = append(parts, fmt.Sprintf("%v %s tok %d", p.Start.Sub(t0).Round(time.Millisecond), p.Worker, p.Token))
	}
	parts = append(parts, "[gap]")
	if after != nil {
		parts = append(parts, fmt.Sprintf("%v %s tok %d", after.Start.Sub(t0).Round(time.Millisecond), after.Worker, after.Token))
	} else {
		parts = append(parts, "none after")
	}
	return strings.Join(parts, ", ")
}

// genRoom is the share of the placeable workers' host slots the active
// sessions may need for the settle step to require that no worker says
// behind: past it, one worker's share may rightly be more than its slots
// (the split is not exact, and a poll takes longer than the host's hold).
const genRoom = 0.6

// baseNeed returns how many workers' host slots the active sessions need,
// at most over the hosts (due/s × the host's hold / genMaxPerHost), and
// how many workers are placeable (running, not cordoned).
func (w *genWorld) baseNeed() (need float64, placeable int) {
	holds := map[string]time.Duration{w.rec.URL: pollHold, w.rec2.URL: pollHold, w.slow.URL: genLoadHold}
	perHost := map[string]float64{}
	for _, s := range w.sessions {
		if s.paused || s.interval <= 0 {
			continue
		}
		for host, hold := range holds {
			if strings.HasPrefix(s.url, host+"/") {
				perHost[host] += hold.Seconds() / s.interval.Seconds()
			}
		}
	}
	for _, slots := range perHost {
		need = max(need, slots/genMaxPerHost)
	}
	for id := range w.workers {
		if !w.cordoned[id] && !w.stopped[id] {
			placeable++
		}
	}
	return need, placeable
}

// exempted reports whether a gap [a, b] of id meets an exempt window.
func (w *genWorld) exempted(id string, a, b time.Time) bool {
	for _, e := range w.exempt {
		if e.session == id && (e.to.IsZero() || a.Before(e.to)) && b.After(e.from) {
			return true
		}
	}
	return false
}

// gapBound is the bound of a gap [a, b] of a session at interval: genBase,
// or under a load step the fair bound (interval × due/achieved, +25 %,
// +200 ms, + a discovery round and the slack), plus each step's (and
// repair's) window and allowance that the gap meets.
func (w *genWorld) gapBound(id string, interval time.Duration, a, b time.Time) (time.Duration, []string) {
	bound := genBase(interval, w.slack)
	var why []string
	for _, st := range append(append([]*genStep(nil), w.steps...), w.effects...) {
		if !a.Before(st.to.Add(st.allowance)) || !b.After(st.from) {
			continue
		}
		if st.load[id] && st.ratio > 1 {
			fair := time.Duration(float64(interval)*st.ratio*1.25) + 200*time.Millisecond + chaosDiscovery + w.slack
			if fair > bound {
				bound = fair
				why = append(why, fmt.Sprintf("%s fair ×%.2f", st.kind.name, st.ratio))
			}
		}
		if st.stall && !a.Before(st.from.Add(genNotice)) {
			// Began under memory pressure, once the workers knew of it:
			// holders keep polling. A gap that began sooner may be a
			// handoff the releaser finished before it knew, whose
			// successor cannot acquire until Redis has room.
			continue
		}
		if st.outage {
			bound += st.to.Sub(st.from)
		}
		bound += st.allowance
		why = append(why, st.kind.name)
	}
	return bound, why
}

// check runs every check over the history and returns the outcome.
func (w *genWorld) check(t0 time.Time) genOutcome {
	end := time.Now()
	for id, sp := range w.open {
		sp.To = end
		w.spans = append(w.spans, sp)
		delete(w.open, id)
	}
	byHost := map[string][]Poll{}
	var polls []Poll
	for _, host := range []*recorder{w.rec, w.rec2, w.slow, w.cpu} {
		byHost[host.URL] = host.snapshot()
		polls = append(polls, byHost[host.URL]...)
	}
	out := genOutcome{kinds: map[string]int{}, polls: len(polls)}
	for _, st := range w.steps {
		out.kinds[st.kind.name]++
	}
	// Safety: overlaps, tokens back or shared, polls past their lease.
	h := History{Polls: polls, End: end}
	// One violation per check and session, with the count and the first.
	type key struct{ check, session string }
	first := map[key]safetyFinding{}
	count := map[key]int{}
	var order []key
	limit := func(p Poll) bool { return inLimitWindows(w.limits, p) }
	for _, f := range safetyFindings(Check(h), t0, limit) {
		if raised, ok := w.fenceRaised[f.session]; ok && f.check == checkPastLease && !f.at.Before(raised) {
			continue // below the counter the run raised, not a newer acquisition's
		}
		if f.check == checkPastLease && abandonedServedLate(w.loaded, f.poll) {
			w.abandonedLate++
			w.t.Logf("limit (docs/guarantees.md, a request abandoned at its timeout): %s", f.detail)
			continue
		}
		k := key{f.check, f.session}
		if count[k] == 0 {
			order = append(order, k)
			first[k] = f
		}
		count[k]++
	}
	for _, k := range order {
		w.violateAt(first[k].at, k.check, k.session, "%d findings, the first: %s", count[k], first[k].detail)
	}
	for _, e := range CheckStateWrites(w.watch.snapshot()).Stale {
		w.violateAt(e.At, checkStateWrite, e.Session, "%v accepted after a newer token was minted", e)
	}
	// Stops: no poll later than genStopBound after pause/rm returned.
	bySession := map[string][]Poll{}
	for _, p := range polls {
		bySession[p.Session] = append(bySession[p.Session], p)
	}
	for _, ps := range bySession {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
	}
	onHost := func(host string, p Poll) bool {
		for _, q := range byHost[host] {
			if q.Session == p.Session && q.Start.Equal(p.Start) && q.Worker == p.Worker {
				return true
			}
		}
		return false
	}
	for _, m := range w.stops {
		var late []Poll
		for _, p := range bySession[m.session] {
			if p.Start.After(m.from) && (m.to.IsZero() || p.Start.Before(m.to)) && (m.host == "" || onHost(m.host, p)) {
				late = append(late, p)
			}
		}
		if len(late) > 0 {
			l := late[len(late)-1]
			// Of the step whose command stopped it.
			w.violateAt(m.from.Add(-genStopBound), checkAfterStop, m.session, "%d polls after %s returned + %v; the last by %s tok %d, %v after the command returned",
				len(late), m.how, genStopBound, l.Worker, l.Token, l.Start.Sub(m.from.Add(-genStopBound)).Round(time.Millisecond))
		}
	}
	// Gaps: every span's largest stretch without a poll start.
	worst := map[string]string{}
	worstAt := map[string]time.Time{}
	counts := map[string]int{}
	for _, sp := range w.spans {
		last := sp.From
		check := func(next time.Time) {
			gap := next.Sub(last)
			out.maxGap = max(out.maxGap, gap)
			if bound, why := w.gapBound(sp.Session, sp.interval, last, next); gap > bound && !w.exempted(sp.Session, last, next) {
				counts[sp.Session]++
				worstAt[sp.Session] = last
				worst[sp.Session] = fmt.Sprintf("gap %v > bound %v (interval %v; %s) from %v to %v; polls around it: %s",
					gap.Round(time.Millisecond), bound.Round(time.Millisecond), sp.interval, strings.Join(append([]string{"base"}, why...), " + "),
					last.Sub(t0).Round(time.Millisecond), next.Sub(t0).Round(time.Millisecond),
					pollsAround(bySession[sp.Session], last, next, t0))
			}
			last = next
		}
		for _, p := range bySession[sp.Session] {
			if p.Start.After(sp.From) && p.Start.Before(sp.To) {
				check(p.Start)
			}
		}
		check(sp.To)
	}
	for _, id := range sortedKeys(worst) {
		w.violateAt(worstAt[id], checkGap, id, "%d gaps over their bound, the last: %s", counts[id], worst[id])
	}
	out.violations = w.violations
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// genSettings reads the generated suite's settings: the seed (fixed in the
// quick run, so that `go test` draws the same plans every time), the
// iterations, the steps per iteration and the kinds.
func genSettings(t *testing.T) (seed uint64, iterations, steps int, kinds []*genKind, only int, slack time.Duration) {
	t.Helper()
	_, iterations, long := chaosSettings(t)
	seed, steps, slack = genQuickSeed, genQuickSteps, genSlackQuick
	if long {
		seed, steps, slack = uint64(time.Now().UnixNano()), genLongSteps, genSlackLong
	} else if os.Getenv("POLLWORKER_CHAOS_ITERATIONS") == "" {
		iterations = genQuickIters
	}
	if v := os.Getenv("POLLWORKER_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "POLLWORKER_CHAOS_SEED")
		seed = s
	}
	if v := os.Getenv("POLLWORKER_CHAOS_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "POLLWORKER_CHAOS_STEPS")
		steps = n
	}
	only = -1
	if v := os.Getenv("POLLWORKER_CHAOS_ONLY"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "POLLWORKER_CHAOS_ONLY")
		only = n
	}
	if v := os.Getenv("POLLWORKER_CHAOS_SLACK"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "POLLWORKER_CHAOS_SLACK")
		slack = d
	}
	kinds, err := selectKinds(os.Getenv("POLLWORKER_CHAOS_KINDS"), long)
	require.NoError(t, err)
	return seed, iterations, steps, kinds, only, slack
}

// TestChaosGenerated runs generated plans of operator actions, faults,
// planted bad data and load against three workers and checks every poll
// the targets saw. The quick run (`go test`) draws genQuickIters plans of
// genQuickSteps steps with a fixed seed from the kinds marked quick;
// POLLWORKER_CHAOS=long draws genLongSteps-step plans from every kind with
// a new seed. POLLWORKER_CHAOS_KINDS, _SEED, _ITERATIONS, _STEPS and _ONLY
// (one iteration of the seed's sequence) choose what runs.
func TestChaosGenerated(t *testing.T) {
	redistest.Require(t)
	seed, iterations, steps, kinds, only, slack := genSettings(t)
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
	}
	kindList := strings.Join(names, ",")
	t.Logf("generated chaos seed %d, %d iterations of %d steps, gap slack %v, kinds %s (reproduce: POLLWORKER_CHAOS_SEED=%d POLLWORKER_CHAOS_ITERATIONS=%d POLLWORKER_CHAOS_STEPS=%d POLLWORKER_CHAOS_KINDS=%s)",
		seed, iterations, steps, slack, kindList, seed, iterations, steps, kindList)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var outs []genOutcome
	for i := range iterations {
		iterSeed := rng.Uint64()
		plan := genPlan(iterSeed, kinds, steps)
		if only >= 0 && i != only {
			continue
		}
		t.Run(fmt.Sprintf("%03d", i), func(t *testing.T) {
			t.Logf("seed %d iteration %d plan: %s", seed, i, planString(plan))
			out := runIteration(t, seed, i, iterSeed, plan, slack)
			outs = append(outs, out)
			if len(out.violations) > 0 {
				t.Errorf("seed %d iteration %d (%s): %d violations (reproduce: POLLWORKER_CHAOS_SEED=%d POLLWORKER_CHAOS_ONLY=%d POLLWORKER_CHAOS_STEPS=%d POLLWORKER_CHAOS_KINDS=%s):%s",
					seed, i, planString(plan), len(out.violations), seed, i, steps, kindList, violationSummary(out.violations))
			}
		})
	}
	t.Logf("generated chaos seed %d, %d iterations of %d steps, kinds %s\n%s", seed, len(outs), steps, kindList, genSummary(outs))
}

// genSummary renders the per-kind table: for each kind, the iterations
// and steps that drew it and the violations, by check, found during or
// after one of its steps (before the next step began; a gap, from its
// start); a row for the violations before any step; a last row for the
// whole run.
func genSummary(outs []genOutcome) string {
	var b strings.Builder
	b.WriteString("| kind | class | iterations | steps |")
	for _, c := range genChecks {
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n|---|---|---|---|" + strings.Repeat("---|", len(genChecks)) + "\n")
	row := func(name, class string, steps func(genOutcome) int, counts func(genViolation) bool) {
		iters, n := 0, 0
		by := map[string]int{}
		for _, o := range outs {
			if k := steps(o); k > 0 {
				iters++
				n += k
			}
			for _, v := range o.violations {
				if counts(v) {
					by[v.check]++
				}
			}
		}
		if iters == 0 && len(by) == 0 {
			return
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d |", name, class, iters, n)
		for _, c := range genChecks {
			fmt.Fprintf(&b, " %d |", by[c])
		}
		b.WriteString("\n")
	}
	for _, k := range genKinds {
		row(k.name, k.class, func(o genOutcome) int { return o.kinds[k.name] }, func(v genViolation) bool { return v.kind == k.name })
	}
	row("(warm-up)", "-", func(genOutcome) int { return 0 }, func(v genViolation) bool { return v.kind == "" })
	row("all", "-", func(o genOutcome) int {
		n := 0
		for _, c := range o.kinds {
			n += c
		}
		return n
	}, func(genViolation) bool { return true })
	return b.String()
}
