// Package timeline keeps each worker's last minutes in Redis for the status
// page's charts: every Step, a worker's Writer turns its cumulative counters
// (polls, late polls, failed polls) into rates and appends them, with the
// leases it holds, to a capped list of its own (keyspace.Space.Timeline).
// Any worker's status page reads every live worker's list in one pipeline,
// so the charts show the whole fleet and survive the restart of the worker
// serving the page. A list expires when its worker stops writing it.
//
// A point costs one LPUSH, one LTRIM and one PEXPIRE per worker per Step
// (10 s by default): nothing next to the polls it describes.
package timeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultStep is how often a Writer appends a point; DefaultKeep points
// (15 minutes at DefaultStep) are kept.
const (
	DefaultStep = 10 * time.Second
	DefaultKeep = 90
)

// firstStep is how soon after start a Writer appends its first point.
const firstStep = time.Second

// Counters are a worker's cumulative counts since it started, and the
// leases it holds now.
type Counters struct {
	Polls, Late, Failures uint64
	Held                  int
}

// Point is one step of a worker's timeline: the rates over the step that
// ended at At, and the leases held at At.
type Point struct {
	At time.Time `json:"-"`
	// AtMs is At in Unix milliseconds, as stored.
	AtMs int64 `json:"t"`
	// Polls, Late and Failures are per second over the step.
	Polls    float64 `json:"p"`
	Late     float64 `json:"l"`
	Failures float64 `json:"f"`
	// Held is the number of leases held at At.
	Held int `json:"h"`
}

// Rate is the point at for the step from prev (read at prevAt) to cur:
// each count's increase per second. A counter that went down (the worker
// restarted) counts from zero; a step of no time gives zero rates.
func Rate(prev, cur Counters, prevAt, at time.Time) Point {
	p := Point{At: at, AtMs: at.UnixMilli(), Held: cur.Held}
	secs := at.Sub(prevAt).Seconds()
	if secs <= 0 {
		return p
	}
	per := func(a, b uint64) float64 {
		if b < a {
			a = 0
		}
		return float64(b-a) / secs
	}
	p.Polls, p.Late, p.Failures = per(prev.Polls, cur.Polls), per(prev.Late, cur.Late), per(prev.Failures, cur.Failures)
	return p
}

// Writer appends a point to its worker's timeline every Step.
type Writer struct {
	// Client is the Redis connection; Key the worker's list
	// (keyspace.Space.Timeline).
	Client redis.Cmdable
	Key    string
	// Step is how often a point is appended (DefaultStep when 0); Keep
	// how many are kept (DefaultKeep when 0).
	Step time.Duration
	Keep int
	// Read returns the worker's counters now. Required.
	Read func() Counters
	// OnError, if set, is told of a failed append; the next step tries
	// again (a timeline is best effort: a gap in a chart, nothing else).
	OnError func(error)
	// Also, if set, adds its commands to each step's pipeline: other data
	// a worker keeps for the status pages, at no extra round trip. ttl is
	// how long the timeline itself is kept.
	Also func(ctx context.Context, pipe redis.Pipeliner, ttl time.Duration)
}

// Run appends a point every Step until ctx is done; it returns nil then.
func (w *Writer) Run(ctx context.Context) error {
	step, keep := w.Step, w.Keep
	if step <= 0 {
		step = DefaultStep
	}
	if keep <= 0 {
		keep = DefaultKeep
	}
	// The first point comes after a second, so a worker that just started
	// shows on the charts at once; the next ones every step.
	t := time.NewTimer(min(firstStep, step))
	defer t.Stop()
	prev, prevAt := w.Read(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			t.Reset(step)
			cur := w.Read()
			if err := w.append(ctx, Rate(prev, cur, prevAt, now), keep, step); err != nil && w.OnError != nil && ctx.Err() == nil {
				w.OnError(err)
			}
			prev, prevAt = cur, now
		}
	}
}

func (w *Writer) append(ctx context.Context, p Point, keep int, step time.Duration) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	pipe := w.Client.Pipeline()
	pipe.LPush(ctx, w.Key, b)
	pipe.LTrim(ctx, w.Key, 0, int64(keep-1))
	pipe.PExpire(ctx, w.Key, time.Duration(keep+1)*step)
	if w.Also != nil {
		w.Also(ctx, pipe, time.Duration(keep+1)*step)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("timeline: append to %s: %w", w.Key, err)
	}
	return nil
}

// Read returns the timelines of the workers in keys (worker id → list key),
// each oldest first, in one pipeline. Entries that do not decode are
// skipped and counted in skipped, never deleted; a key of another type
// reads as an empty timeline and counts as one skipped entry.
func Read(ctx context.Context, client redis.Cmdable, keys map[string]string) (lines map[string][]Point, skipped int, err error) {
	pipe := client.Pipeline()
	cmds := make(map[string]*redis.StringSliceCmd, len(keys))
	for id, key := range keys {
		cmds[id] = pipe.LRange(ctx, key, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isWrongType(err) && err != redis.Nil {
		return nil, 0, fmt.Errorf("timeline: read: %w", err)
	}
	lines = make(map[string][]Point, len(keys))
	for id, cmd := range cmds {
		raw, err := cmd.Result()
		if err != nil {
			if err != redis.Nil {
				skipped++
			}
			continue
		}
		pts, bad := decode(raw)
		skipped += bad
		if len(pts) > 0 {
			lines[id] = pts
		}
	}
	return lines, skipped, nil
}

// decode turns a list read newest first into points oldest first.
func decode(raw []string) (pts []Point, bad int) {
	for i := len(raw) - 1; i >= 0; i-- {
		var p Point
		if err := json.Unmarshal([]byte(raw[i]), &p); err != nil || p.AtMs <= 0 {
			bad++
			continue
		}
		p.At = time.UnixMilli(p.AtMs)
		pts = append(pts, p)
	}
	return pts, bad
}

func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}
