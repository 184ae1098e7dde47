package poller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBehindLate(t *testing.T) {
	require.Equal(t, time.Second, behindLate(10*time.Millisecond))
	require.Equal(t, time.Second, behindLate(10*time.Second))
	require.Equal(t, 6*time.Minute, behindLate(time.Hour))
}

// TestLateness: a stretch of lateness begins when a poll became
// behindLate late, goes on while late polls follow or the oldest waiting
// poll is late, and ends at a poll in time with none waiting, or when the
// evidence runs out.
func TestLateness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type start struct {
		due, now int // ms
		queued   bool
	}
	type head struct {
		due     int // ms
		waiting bool
	}
	for _, tt := range []struct {
		name   string
		give   []start
		head   head
		now    int // ms
		want   time.Duration
		ivOver time.Duration // interval of every poll; default 100ms
	}{
		{name: "keeping up", now: 5000},
		{name: "late but under the bound", give: []start{{0, 900, true}, {100, 1050, true}}, now: 1100},
		{name: "one late poll", give: []start{{0, 1500, false}}, now: 2000, want: time.Second},
		{name: "one late poll, then nothing for its bound", give: []start{{0, 1500, false}}, now: 2600},
		{name: "late polls keep coming", give: []start{{0, 1500, true}, {1000, 2400, true}, {2000, 3300, true}},
			now: 4000, want: 3 * time.Second},
		{name: "a gap starts a new stretch", give: []start{{0, 1500, true}, {3000, 4600, true}}, now: 4800, want: 800 * time.Millisecond},
		{name: "in time with none waiting ends it", give: []start{{0, 1500, true}, {1450, 1500, false}}, now: 1600},
		{name: "in time while others wait does not", give: []start{{0, 1500, true}, {1450, 1500, true}}, now: 1600,
			want: 600 * time.Millisecond},
		{name: "the oldest waiting poll carries it on", give: []start{{0, 1500, true}}, head: head{due: 500, waiting: true},
			now: 10_000, want: 9 * time.Second},
		{name: "waiting alone", head: head{due: 500, waiting: true}, now: 4000, want: 2500 * time.Millisecond},
		{name: "waiting, not yet that late", head: head{due: 500, waiting: true}, now: 1400},
		{name: "long intervals: a tenth of the interval", give: []start{{0, 5000, true}}, ivOver: time.Minute, now: 5000},
		{name: "long intervals, later", give: []start{{0, 7000, true}}, ivOver: time.Minute, now: 7000, want: time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			iv := 100 * time.Millisecond
			if tt.ivOver > 0 {
				iv = tt.ivOver
			}
			var l lateness
			for _, s := range tt.give {
				l.started(at(s.due), at(s.now), iv, s.queued)
			}
			require.Equal(t, tt.want, l.behindFor(at(tt.now), tt.head.waiting, at(tt.head.due), iv))
		})
	}
}

// TestSchedulerReportsBehind: on a fake clock, with one slot and a poll
// that holds it, the session waiting for it makes the worker behind once
// it has been behindLate late for behindSpan; polls in time clear it.
func TestSchedulerReportsBehind(t *testing.T) {
	f := newSchedFixture(t)
	f.sched.limit, f.sched.behindSpan = 1, 2*time.Second
	behind := func() bool { st, _, _ := f.sched.snapshot(); return st.Behind }
	f.start("a")
	pa := f.nextPoll()
	b := f.start("b")
	f.waitPhase(b, admitting)
	require.False(t, behind())
	f.clock.Step(time.Second + time.Millisecond) // b is behindLate late
	require.False(t, behind())
	require.NoError(t, f.leases.RenewAll(context.Background()).Err)
	f.clock.Step(2 * time.Second) // for behindSpan
	require.True(t, behind(), "b has waited behindLate + behindSpan")

	require.NoError(t, f.leases.RenewAll(context.Background()).Err)
	close(pa.finish) // b takes the slot, late; a waits behind it
	pb := f.nextPoll()
	require.Equal(t, b, pb.w)
	require.True(t, behind())
	close(pb.finish) // a polls again at once (it overran its interval): in time, none waiting
	pa = f.nextPoll()
	require.False(t, behind(), "a poll in time with none waiting clears it")
	close(pa.finish) // b, waiting again, takes the slot
	pb = f.nextPoll()
	close(pb.finish)
	f.waitPhase(pa.w, queued)
	f.waitPhase(b, queued)
}
