package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The generated chaos suite's rules, in pure code: the plan a seed draws,
// the kinds POLLWORKER_CHAOS_KINDS selects, the bound of a gap.

func TestGenPlanIsSeeded(t *testing.T) {
	kinds, err := selectKinds("all", false)
	require.NoError(t, err)
	a, b := genPlan(42, kinds, 8), genPlan(42, kinds, 8)
	require.Equal(t, planString(a), planString(b), "the same seed draws the same plan")
	for i := range a {
		require.Equal(t, a[i].seed, b[i].seed, "and the same parameters")
		require.Equal(t, a[i].pause, b[i].pause)
	}
	require.NotEqual(t, planString(a), planString(genPlan(43, kinds, 8)), "another seed, another plan")
}

func TestSelectKinds(t *testing.T) {
	names := func(ks []*genKind) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.name)
		}
		return out
	}
	var quick, every []string
	for _, k := range genKinds {
		every = append(every, k.name)
		if k.quick {
			quick = append(quick, k.name)
		}
	}
	tests := []struct {
		spec    string
		long    bool
		want    []string
		wantErr string
	}{
		{spec: "", want: quick},
		{spec: "", long: true, want: every},
		{spec: "all", want: every},
		{spec: "pause,rm", want: []string{"pause", "rm"}},
		{spec: "load", want: []string{"overload-host-limit", "overload-cpu"}},
		{spec: "default,-load", want: quick[:len(quick)-1]},
		{spec: "data,-huge-fence,-bad-state", want: []string{"bad-lease-type", "bad-fence-type", "bad-marker-type", "bad-node-type", "bad-high-water", "junk-members"}},
		{spec: "-add", want: quick[1:]},
		{spec: "default,-pause,pause", want: quick},
		{spec: "-add,add", want: quick},
		{spec: "nope", wantErr: `no kind or class "nope"`},
		{spec: "pause,-pause", wantErr: "selects no kind"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := selectKinds(tt.spec, tt.long)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, names(got))
		})
	}
}

func TestGapBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	kill := &genStep{kind: &genKind{name: "worker-kill-9"}, from: at(1000), to: at(1100), allowance: genFailover, outage: true}
	pressure := &genStep{kind: &genKind{name: "memory-pressure"}, from: at(8000), to: at(10000), stall: true, outage: true}
	load := &genStep{kind: &genKind{name: "overload-host-limit"}, from: at(20000), to: at(26000),
		load: map[string]bool{"l1": true}, ratio: 3}
	w := &genWorld{steps: []*genStep{kill, pressure, load}, slack: genSlackLong}
	base := genBase(chaosInterval, genSlackLong)
	tests := []struct {
		name     string
		session  string
		from, to int
		want     time.Duration
	}{
		{"no step: the base", "s1", 100, 300, base},
		{"meets the kill: its window and failover", "s1", 900, 1500, base + 100*time.Millisecond + genFailover},
		{"after the kill's allowance: the base", "s1", 1100 + int(genFailover/time.Millisecond) + 1, 7000, base},
		{"began under memory pressure: holders keep polling", "s1", 8500, 9500, base},
		{"began as memory pressure began: a handoff its successor cannot finish", "s1", 8050, 9500, base + 2*time.Second},
		{"began before memory pressure: it lasts through it", "s1", 7900, 9500, base + 2*time.Second},
		{"a load session under load: the fair bound", "l1", 21000, 22000,
			time.Duration(float64(chaosInterval)*3*1.25) + 200*time.Millisecond + chaosDiscovery + genSlackLong},
		{"another session under host load: the base", "s1", 21000, 22000, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := w.gapBound(tt.session, chaosInterval, at(tt.from), at(tt.to))
			require.Equal(t, tt.want, got)
		})
	}
}

// TestGenBaseNeed: the settle step requires that no worker says behind
// only while the active sessions need at most genRoom of the placeable
// workers' host slots: the generator's 12 sessions every 100 ms on a
// host holding each poll 30 ms need 0.9 of one worker's 4 slots, so a
// fleet drained down to one worker may rightly stay behind.
func TestGenBaseNeed(t *testing.T) {
	w := &genWorld{rec: &recorder{URL: "http://a"}, rec2: &recorder{URL: "http://b"}, slow: &recorder{URL: "http://c"},
		sessions: map[string]*genSession{}, workers: map[string]lossWorker{"w1": {}, "w2": {}, "w3": {}},
		cordoned: map[string]bool{}, stopped: map[string]bool{}}
	for i := range genSessions {
		id := "s" + string(rune('a'+i))
		w.sessions[id] = &genSession{id: id, url: "http://a/" + id, interval: chaosInterval}
	}
	w.sessions["paused"] = &genSession{id: "paused", url: "http://a/p", interval: chaosInterval, paused: true}
	w.sessions["other"] = &genSession{id: "other", url: "http://b/o", interval: time.Second}
	need, placeable := w.baseNeed()
	require.InDelta(t, 0.9, need, 1e-9, "12 × 30ms/100ms = 3.6 slots of 4")
	require.Equal(t, 3, placeable)
	require.LessOrEqual(t, need, genRoom*float64(placeable), "three workers have room")

	w.cordoned["w1"], w.stopped["w2"] = true, true
	need, placeable = w.baseNeed()
	require.Equal(t, 1, placeable)
	require.Greater(t, need, genRoom*float64(placeable), "one worker left has not")
}

// TestLoadRatios: the fair bound of a load step is the busiest worker's
// due/achieved when its share is above the fleet's.
func TestLoadRatios(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	dueOf := map[string]float64{"a": 10, "b": 10, "c": 10, "d": 10}
	var polls []Poll
	// w1 holds a, b and c and polls each 4 times; w2 holds d and polls it
	// 8 times.
	for i := range 4 {
		for _, id := range []string{"a", "b", "c"} {
			polls = append(polls, Poll{Session: id, Worker: "w1", Start: at(i * 100)})
		}
	}
	for i := range 8 {
		polls = append(polls, Poll{Session: "d", Worker: "w2", Start: at(i * 50)})
	}
	due, achieved, worst := loadRatios(dueOf, polls)
	require.Equal(t, 40.0, due)
	require.Equal(t, 20, achieved)
	require.InDelta(t, 30.0/12, worst, 1e-9, "w1: 30 due, 12 done")

	// A session that moved is counted with its last holder.
	polls = append(polls, Poll{Session: "c", Worker: "w2", Start: at(1000)})
	_, _, worst = loadRatios(dueOf, polls)
	require.InDelta(t, 20.0/9, worst, 1e-9, "w1: 20 due (a, b), 12 done; w2: 20 due (c, d), 9 done")
}

func TestAbandonedServedLate(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	loaded := []timeWindow{{at(1000), at(8000)}, {at(20000), at(27000)}}
	for _, tc := range []struct {
		name string
		p    Poll
		want bool
	}{
		{"abandoned, served in a load step", Poll{Start: at(7900), Abandoned: true}, true},
		{"abandoned, served at the step's end", Poll{Start: at(8000), Abandoned: true}, true},
		{"abandoned, in the second step", Poll{Start: at(20000), Abandoned: true}, true},
		{"abandoned, served after the step", Poll{Start: at(8001), Abandoned: true}, false},
		{"abandoned, before any step", Poll{Start: at(999), Abandoned: true}, false},
		{"served to its end in a load step", Poll{Start: at(5000)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, abandonedServedLate(loaded, tc.p))
		})
	}
	require.False(t, abandonedServedLate(nil, Poll{Start: at(5000), Abandoned: true}), "no load step")
}
