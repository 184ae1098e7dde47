package main

import (
	"context"
	"html/template"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/timeline"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
)

// pageWindow is how far back the status page's charts go.
const pageWindow = 15 * time.Minute

// workerCounters are the counts this worker's timeline is made of: polls
// that got an answer or failed (not those cut short by a lost lease),
// failed polls (4xx, 5xx, timeouts, transport errors), late polls and the
// leases held.
func workerCounters(c *poller.Coordinator, hp *httppoll.Poller) timeline.Counters {
	ps, hs := c.PollStats(), hp.Stats()
	var polls, failures uint64
	for _, o := range httppoll.Outcomes() {
		switch o {
		case httppoll.OutcomeCancelled:
			continue
		case httppoll.OutcomeClientError, httppoll.OutcomeServerError, httppoll.OutcomeTimeout, httppoll.OutcomeError:
			failures += hs.Polls[o]
		}
		polls += hs.Polls[o]
	}
	return timeline.Counters{Polls: polls, Late: uint64(max(ps.Late, 0)), Failures: failures, Held: ps.LeasesHeld}
}

// pageCharts is the status page's history: the live workers' timelines as
// charts, and the placement per worker as bars.
type pageCharts struct {
	Polls, Late, Failures, Held template.HTML
	Placement                   template.HTML
	// Skipped counts timeline entries that did not decode.
	Skipped int
}

// readCharts reads the timelines of the workers in st and draws them,
// between now-pageWindow and now.
func readCharts(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, st clusterStatus, now time.Time) (pageCharts, error) {
	ids := make(map[string]string, len(st.Nodes))
	for _, n := range st.Nodes {
		ids[n.ID] = keys.Timeline(n.ID)
	}
	lines, skipped, err := timeline.Read(ctx, client, ids)
	if err != nil {
		return pageCharts{}, err
	}
	from := now.Add(-pageWindow)
	chart := func(title string, m func(timeline.Point) float64) template.HTML {
		return timeline.Chart(title, timeline.Of(lines, m), from, now)
	}
	pc := pageCharts{
		Polls:    chart("polls/s", func(p timeline.Point) float64 { return p.Polls }),
		Late:     chart("late polls/s (started more than a tenth of their interval late)", func(p timeline.Point) float64 { return p.Late }),
		Failures: chart("failed polls/s (4xx, 5xx, timeouts, errors)", func(p timeline.Point) float64 { return p.Failures }),
		Held:     chart("leases held", func(p timeline.Point) float64 { return float64(p.Held) }),
		Skipped:  skipped,
	}
	bars := make([]timeline.Bar, 0, len(st.Nodes))
	unit := "polls/s"
	for _, n := range st.Nodes {
		b := timeline.Bar{Name: n.ID, Held: n.PollsPerSecond, Planned: float64(n.Planned) / 86400}
		if st.PlanUnit != "polls/day" {
			b.Held, b.Planned = float64(n.Leases), float64(n.Planned)
		}
		bars = append(bars, b)
	}
	if st.PlanUnit != "polls/day" {
		unit = st.PlanUnit
	}
	pc.Placement = timeline.Bars("placement: held against planned", unit, bars)
	return pc, nil
}
