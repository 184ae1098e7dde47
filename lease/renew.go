package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pollworker/pollworker/keyspace"
)

// RenewReport says what one renewal cycle did.
type RenewReport struct {
	// Renewed leases are Held with a new deadline.
	Renewed int
	// Lost leases were gone or owned by another in Redis.
	Lost []*Lease
	// Uncertain leases got no answer; their polling stopped.
	Uncertain []*Lease
	// Err is the first request error, if any.
	Err error
	// RoundTrip is how long the requests took, from the first sent to the
	// last reply received.
	RoundTrip time.Duration
	// Young leases were Held and not sent for renewal: their last request
	// was sent less than Config.MinRenewAge ago. When the cycle failed
	// (Err), they are Uncertain too, and in Uncertain; under Redis Cluster
	// only those on a master a failed request went to (or whose master
	// the client cannot name).
	Young int
}

// RenewAll renews every Held or Uncertain lease (but the Held ones younger
// than Config.MinRenewAge, unless all are) and reports exactly which were
// not renewed. When a request of the cycle fails, the young leases become
// Uncertain as well: all of them with one Redis server, and under Redis
// Cluster those whose master, by the client's slot map, is one a failed
// request went to (a master that died stops the polls of its own leases,
// not of the whole worker's). The script calls (BatchSize leases each) go out at once
// in a few pipelines on separate connections, whose replies are handled as
// they arrive: one round trip per shard in wall time, whatever the number
// of leases. The goroutines it starts for this have exited when it returns.
//
// Without a deadline on ctx, the cycle is bounded by TTL/3: a later answer
// could not keep any lease alive anyway.
func (m *Manager) RenewAll(ctx context.Context) RenewReport {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.TTL/3)
		defer cancel()
	}
	m.dropStale(ctx)
	leases, young := m.toRenew()
	if len(leases) == 0 {
		return RenewReport{}
	}
	batches := m.leaseBatches(leases)
	calls := make([]*call, len(batches))
	for i, b := range batches {
		// in runs of one owner value (the leases acquired together share
		// theirs), each value passed once
		slices.SortStableFunc(b, func(x, y *Lease) int { return strings.Compare(x.Owner(), y.Owner()) })
		args := m.renewArgs(len(b), ownerRuns(b))
		for _, l := range b {
			args = append(args, l.keyArg)
		}
		args = append(args, m.ttlArg)
		args = appendOwnerRuns(args, len(b), func(j int) string { return b[j].Owner() })
		calls[i] = &call{leases: b, args: args}
	}

	start := m.cfg.Clock.Now()
	var mu sync.Mutex // guards rep, last and changes
	var rep RenewReport
	var changes []change
	var gone []*Lease       // found missing or another owner's
	var failedKeys []string // a key of each call that failed
	last := start
	m.send(ctx, m.renew, calls, m.pipelines(len(calls)), true, func(done []*call, now time.Time) {
		for _, c := range done {
			r, ch, g := m.renewed(c, now)
			mu.Lock()
			gone = append(gone, g...)
			rep.Renewed += r.Renewed
			rep.Lost = append(rep.Lost, r.Lost...)
			rep.Uncertain = append(rep.Uncertain, r.Uncertain...)
			if rep.Err == nil {
				rep.Err = r.Err
			}
			if r.Err != nil {
				failedKeys = append(failedKeys, c.leases[0].key())
			}
			changes = append(changes, ch...)
			mu.Unlock()
		}
		mu.Lock()
		if now.After(last) {
			last = now
		}
		mu.Unlock()
	})
	rep.RoundTrip, rep.Young = last.Sub(start), len(young)
	if rep.Err != nil {
		u, ch := m.failYoung(m.onFailedMasters(ctx, young, failedKeys), rep.Err)
		rep.Uncertain = append(rep.Uncertain, u...)
		changes = append(changes, ch...)
	}
	for _, c := range calls {
		m.putRenewArgs(c.args)
	}
	if rep.Err != nil {
		m.log.Warn("lease renewal failed", zap.String("event", "renew_error"),
			zap.Int("uncertain", len(rep.Uncertain)), zap.Error(rep.Err))
	}
	m.logSummary(changes, Lost, zapcore.WarnLevel, "leases lost: held by another owner value, or missing", "lost")
	m.logSummary(changes, Held, zapcore.InfoLevel, "leases held again", "recovered")
	m.notify(changes)
	m.probeLoss(ctx, gone)
	return rep
}

// toRenew returns the leases a renewal cycle renews now: every Held or
// Uncertain lease, but the Held ones whose last request was sent less than
// MinRenewAge ago (young), unless that leaves none to renew: a cycle then
// renews them all, so that every cycle of a worker holding leases asks
// Redis and a failure is seen (RenewAll).
func (m *Manager) toRenew() (renew, young []*Lease) {
	leases := m.snapshot()
	if m.cfg.MinRenewAge <= 0 {
		return leases, nil
	}
	// deadline = sent + TTL - DriftMargin, so sent > now - MinRenewAge
	// when deadline > now + TTL - DriftMargin - MinRenewAge
	cutoff := m.cfg.Clock.Now().Add(m.cfg.TTL - m.cfg.DriftMargin - m.cfg.MinRenewAge)
	renew = make([]*Lease, 0, len(leases))
	for _, l := range leases {
		l.mu.Lock()
		skip := l.state == Held && l.deadline.After(cutoff)
		l.mu.Unlock()
		if skip {
			young = append(young, l)
		} else {
			renew = append(renew, l)
		}
	}
	if len(renew) == 0 {
		return leases, nil
	}
	return renew, young
}

// failYoung makes the young leases of a cycle whose renewal failed
// Uncertain, as if theirs had failed too: Redis did not answer, and polls
// stop at a failed cycle whatever the age of their lease (fail closed). The
// next cycle renews them (Uncertain leases are never skipped).
func (m *Manager) failYoung(young []*Lease, err error) (uncertain []*Lease, changes []change) {
	for _, l := range young {
		if ch, ok := m.transition(l, Uncertain, "renewal cycle failed: "+err.Error()); ok {
			changes = append(changes, ch)
			uncertain = append(uncertain, l)
		}
	}
	return uncertain, changes
}

// onFailedMasters returns the young leases of a failed cycle that are
// uncertain: all of them, but under Redis Cluster only those whose master
// is the master of a key in failedKeys (one of each call that failed) or
// cannot be named. The masters come from the client's slot map as it is
// now; a lease on another master keeps its deadline, as it would had no
// request of the cycle failed.
func (m *Manager) onFailedMasters(ctx context.Context, young []*Lease, failedKeys []string) []*Lease {
	cc, ok := m.cfg.Client.(*redis.ClusterClient)
	if !ok || len(young) == 0 {
		return young
	}
	master := func(key string) (string, bool) {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil || c == nil {
			return "", false
		}
		return c.Options().Addr, true
	}
	failed := make(map[string]bool, len(failedKeys))
	for _, k := range failedKeys {
		addr, ok := master(k)
		if !ok {
			return young
		}
		failed[addr] = true
	}
	return uncertainYoung(young, func(l *Lease) uint16 { return keyspace.Slot(l.key()) },
		func(l *Lease) (string, bool) { return master(l.key()) }, failed)
}

// uncertainYoung returns the leases of young whose master (masterOf, asked
// once per hash slot) is in failed or unknown.
func uncertainYoung(young []*Lease, slotOf func(*Lease) uint16, masterOf func(*Lease) (string, bool), failed map[string]bool) []*Lease {
	uncertain := make(map[uint16]bool) // by slot
	var out []*Lease
	for _, l := range young {
		s := slotOf(l)
		u, seen := uncertain[s]
		if !seen {
			addr, ok := masterOf(l)
			u = !ok || failed[addr]
			uncertain[s] = u
		}
		if u {
			out = append(out, l)
		}
	}
	return out
}

// renewArgs returns the start of a renew call's command line for n leases
// whose owner values come in runs,
// reusing a line of an earlier cycle when one is large enough: a cycle of
// 100,000 leases would otherwise allocate 3 MB of them.
func (m *Manager) renewArgs(n, runs int) []any {
	extra := n + 1 + 2*runs
	if p, ok := m.argsPool.Get().(*[]any); ok && cap(*p) >= 3+extra {
		return append((*p)[:0], "evalsha", m.renew.Hash(), n)
	}
	return evalsha(m.renew, n, extra)
}

// ownerRuns counts the runs of equal owner values in leases.
func ownerRuns(leases []*Lease) int {
	runs := 0
	for j, l := range leases {
		if j == 0 || l.Owner() != leases[j-1].Owner() {
			runs++
		}
	}
	return runs
}

// putRenewArgs keeps args for a later cycle once its call is done (go-redis
// holds no reference to a command after Exec returns); it keeps no lease
// reachable.
func (m *Manager) putRenewArgs(args []any) {
	clear(args)
	args = args[:0]
	m.argsPool.Put(&args)
}

// leaseBatches groups leases into script calls of at most BatchSize; under
// Redis Cluster each call holds one hash slot.
func (m *Manager) leaseBatches(leases []*Lease) [][]*Lease {
	return chunkBySlot(leases, m.cfg.BatchSize, m.cluster, func(l *Lease) uint16 { return keyspace.Slot(l.key()) })
}

// notRenewed returns the positions (from 0) of the leases of a renew call
// that were not renewed, from the script's reply: their positions from 1,
// in increasing order. Anything else is an error: never read as renewed.
func (c *call) notRenewed() ([]int, error) {
	if c.err != nil {
		return nil, c.err
	}
	vals, err := c.cmd.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(vals))
	prev := int64(0)
	for _, v := range vals {
		i, ok := v.(int64)
		if !ok || i <= prev || i > int64(len(c.leases)) {
			return nil, fmt.Errorf("renew script reply %v: not increasing positions in [1, %d]", vals, len(c.leases))
		}
		out = append(out, int(i-1))
		prev = i
	}
	return out, nil
}

// renewed applies the reply of one renew call, received by now; gone are
// the leases whose keys it found missing or another owner's.
func (m *Manager) renewed(c *call, now time.Time) (rep RenewReport, changes []change, gone []*Lease) {
	failed, err := c.notRenewed()
	if err != nil {
		rep.Err = err
		for _, l := range c.leases {
			if ch, ok := m.transition(l, Uncertain, "renew failed: "+err.Error()); ok {
				changes = append(changes, ch)
			}
			rep.Uncertain = append(rep.Uncertain, l)
		}
		return rep, changes, nil
	}
	g := newGroup(c.sent.Add(m.cfg.TTL-m.cfg.DriftMargin), len(c.leases))
	defer m.seal(g, now)
	for j, l := range c.leases {
		if len(failed) > 0 && failed[0] == j {
			failed = failed[1:]
			if ch, ok := m.transition(l, Lost, "not owner"); ok {
				changes = append(changes, ch)
			}
			m.forget(l)
			rep.Lost = append(rep.Lost, l)
			gone = append(gone, l)
			continue
		}
		ch, ok := m.extend(l, g, now)
		if !ok {
			rep.Lost = append(rep.Lost, l)
			continue
		}
		rep.Renewed++
		if ch.to != 0 {
			changes = append(changes, ch)
		}
	}
	return rep, changes, gone
}

// extend applies a successful renewal whose deadline is g's, at now. It
// returns ok=false when the lease can no longer be used (already lost, or
// the reply came too late).
func (m *Manager) extend(l *Lease, g *expiryGroup, now time.Time) (change, bool) {
	l.mu.Lock()
	if l.state != Held && l.state != Uncertain {
		lost := l.state == Lost
		l.mu.Unlock()
		if lost {
			// The deadline passed while this renewal was in flight: Redis
			// has just extended a key nobody will use; drop it.
			m.mu.Lock()
			m.stale = append(m.stale, l)
			m.mu.Unlock()
		}
		return change{}, false
	}
	if !now.Before(g.deadline) {
		from := l.state
		l.setLocked(Lost, "renewed past deadline")
		l.mu.Unlock()
		m.forget(l)
		m.mu.Lock()
		m.stale = append(m.stale, l)
		m.mu.Unlock()
		return change{l, from, Lost}, false
	}
	if g.deadline.After(l.deadline) {
		l.joinLocked(g)
	}
	from := l.state
	moved := l.setLocked(Held, "")
	l.mu.Unlock()
	if moved {
		if ce := m.log.Check(zapcore.DebugLevel, "lease held again"); ce != nil {
			ce.Write(zap.String("session", l.session), zap.String("event", "recovered"), zap.Int64("token", l.token))
		}
		return change{l, from, Held}, true
	}
	return change{}, true
}

// transition moves l to st (Uncertain or Lost) and logs it at debug (the
// caller logs the step's summary: logSummary).
func (m *Manager) transition(l *Lease, st State, reason string) (change, bool) {
	l.mu.Lock()
	from := l.state
	moved := l.setLocked(st, reason)
	l.mu.Unlock()
	if !moved {
		return change{}, false
	}
	if ce := m.log.Check(zapcore.DebugLevel, "lease "+st.String()); ce != nil {
		ce.Write(zap.String("session", l.session), zap.String("event", st.String()),
			zap.Int64("token", l.token), zap.String("reason", reason))
	}
	return change{l, from, st}, true
}

// logSummary logs one line for the leases that changes moved to st (from
// any state but none): their number and a few of their sessions. Each
// lease's own line is at debug: a Redis outage moves every lease of a
// worker at once, thousands of lines otherwise. Lines of one message
// within summaryWindow of the first are one line (summaries.add): the
// leases of one outage expire in one group per renewal batch, each a
// step of its own.
func (m *Manager) logSummary(changes []change, st State, level zapcore.Level, msg, event string) {
	var sessions []string
	n := 0
	for _, ch := range changes {
		if ch.to != st || ch.from == 0 {
			continue
		}
		n++
		if len(sessions) < summarySessions {
			sessions = append(sessions, ch.l.session)
		}
	}
	if n > 0 {
		m.summaries.add(m, summary{level: level, msg: msg, event: event, leases: n, sessions: sessions})
	}
}

// summarySessions is how many sessions a summary line names.
const summarySessions = 5
