package timeline

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestRate(t *testing.T) {
	at := time.Unix(1000, 0)
	tests := []struct {
		name                  string
		prev, cur             Counters
		step                  time.Duration
		polls, late, failures float64
		held                  int
	}{
		{"steady", Counters{Polls: 100, Late: 2, Failures: 1}, Counters{Polls: 200, Late: 4, Failures: 11, Held: 7}, 10 * time.Second, 10, 0.2, 1, 7},
		{"idle", Counters{Polls: 5}, Counters{Polls: 5, Held: 1}, 10 * time.Second, 0, 0, 0, 1},
		{"restarted: counts from zero", Counters{Polls: 500}, Counters{Polls: 20}, 10 * time.Second, 2, 0, 0, 0},
		{"no time passed", Counters{}, Counters{Polls: 10, Held: 3}, 0, 0, 0, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Rate(tt.prev, tt.cur, at.Add(-tt.step), at)
			require.Equal(t, at.UnixMilli(), p.AtMs)
			require.InDelta(t, tt.polls, p.Polls, 1e-9)
			require.InDelta(t, tt.late, p.Late, 1e-9)
			require.InDelta(t, tt.failures, p.Failures, 1e-9)
			require.Equal(t, tt.held, p.Held)
		})
	}
}

func TestDecodeSkipsMalformedOldestFirst(t *testing.T) {
	// As stored: newest first.
	raw := []string{`{"t":3000,"p":3}`, `not json`, `{"t":0,"p":9}`, `{"t":1000,"p":1}`}
	pts, bad := decode(raw)
	require.Equal(t, 2, bad)
	require.Len(t, pts, 2)
	require.Equal(t, int64(1000), pts[0].AtMs)
	require.Equal(t, 3.0, pts[1].Polls)
	require.Equal(t, time.UnixMilli(3000), pts[1].At)
}

func TestWriterAppendsAndReadReturnsEveryWorker(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	var polls atomic.Uint64
	w := &Writer{Client: c, Key: "poll:timeline:w1", Step: 5 * time.Millisecond, Keep: 3,
		Read: func() Counters { return Counters{Polls: polls.Add(10), Held: 2} },
		Also: func(ctx context.Context, pipe redis.Pipeliner, ttl time.Duration) {
			pipe.Set(ctx, "poll:failing:w1", "[]", ttl)
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return c.LLen(ctx, w.Key).Val() == 3 && polls.Load() >= 60 }, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.LessOrEqual(t, c.LLen(context.Background(), w.Key).Val(), int64(3), "capped at Keep")
	require.Greater(t, mr.TTL(w.Key), time.Duration(0), "expires when the worker stops writing")
	require.Equal(t, "[]", c.Get(context.Background(), "poll:failing:w1").Val(), "Also's commands run with each step")
	require.Equal(t, mr.TTL(w.Key), mr.TTL("poll:failing:w1"), "kept as long as the timeline")

	bg := context.Background()
	require.NoError(t, c.Set(bg, "poll:timeline:wrong", "a string", 0).Err())
	require.NoError(t, c.RPush(bg, "poll:timeline:junk", "{", `{"t":5,"h":1}`).Err())
	lines, skipped, err := Read(bg, c, map[string]string{"w1": w.Key, "wrong": "poll:timeline:wrong", "junk": "poll:timeline:junk", "gone": "poll:timeline:gone"})
	require.NoError(t, err)
	require.Len(t, lines["w1"], 3)
	for i := 1; i < len(lines["w1"]); i++ {
		require.False(t, lines["w1"][i].At.Before(lines["w1"][i-1].At), "oldest first")
	}
	require.Equal(t, 2, lines["w1"][0].Held)
	require.Len(t, lines["junk"], 1)
	require.NotContains(t, lines, "wrong")
	require.NotContains(t, lines, "gone")
	require.Equal(t, 2, skipped, "one wrong-typed key, one malformed entry")
	require.Equal(t, "a string", c.Get(bg, "poll:timeline:wrong").Val(), "never deleted")
}

func TestChart(t *testing.T) {
	now := time.Unix(10_000, 0)
	from := now.Add(-15 * time.Minute)
	lines := map[string][]Point{
		"w2":         {{At: now.Add(-time.Minute), Polls: 4}, {At: now, Polls: 8}},
		"<script>w1": {{At: now.Add(-20 * time.Minute), Polls: 100}, {At: now.Add(-2 * time.Minute), Polls: 2}, {At: now, Polls: 6}},
	}
	svg := string(Chart("polls/s", Of(lines, func(p Point) float64 { return p.Polls }), from, now))
	require.NotContains(t, svg, "<script>", "names are escaped")
	require.Contains(t, svg, "&lt;script&gt;w1")
	require.Equal(t, 2, strings.Count(svg, `<polyline class="series"`))
	// The point before the window is left out, so the axis tops at 8.
	require.Contains(t, svg, `>8<`, "the axis tops at the largest value in the window")
	w2 := svg[strings.Index(svg, `data-name="w2"`):]
	w2 = w2[:strings.Index(w2, "/>")]
	require.Equal(t, 2, strings.Count(w2, ","), "two points: %s", w2)
	require.Contains(t, w2, fmt.Sprintf("%.1f,", float64(chartW)), "now is at the right edge")

	require.Contains(t, svg, ">-15m<")
	empty := string(Chart("nothing yet", nil, from, now))
	require.Contains(t, empty, "nothing yet")
	require.NotContains(t, empty, "polyline")
}

func TestBars(t *testing.T) {
	svg := string(Bars("placement", "polls/s", []Bar{{Name: "w1", Held: 10, Planned: 20}, {Name: "w2", Held: 5, Planned: 0}}))
	require.Equal(t, 2, strings.Count(svg, `class="held"`))
	require.Contains(t, svg, `class="planned" x="120" y="13" width="260.0"`, "the largest value spans the bar")
	require.Contains(t, svg, `class="held" x="120" y="3" width="130.0"`)
	require.Contains(t, svg, "10 / 20 polls/s")
}

func TestAxisLabel(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 3: "3", 3.5: "3.5", 120: "120", 4200: "4.2k", 25000: "25k"} {
		require.Equal(t, want, axisLabel(v), "%v", v)
	}
}
