package poller

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// gapObserver records the handoff gaps a coordinator reports.
type gapObserver struct {
	NopObserver
	mu   sync.Mutex
	gaps []time.Duration
}

func (o *gapObserver) HandoffGap(d time.Duration) {
	o.mu.Lock()
	o.gaps = append(o.gaps, d)
	o.mu.Unlock()
}

func (o *gapObserver) take() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.gaps
	o.gaps = nil
	return out
}

func TestHandoffGapReportedAtFirstPollAfterGracefulHandoff(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 20, 50*time.Millisecond)
	rec := newRecorder()
	obs1, obs2 := &gapObserver{}, &gapObserver{}
	cfg1 := fastConfig(client, "w1", rec.poller("w1"))
	cfg1.Observer = obs1
	w1 := start(t, cfg1)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec.polled(id) == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, obs1.take(), "first acquisitions follow no release")

	// w2 joins: w1 hands it its share (release, then an event), and w2
	// reports one gap per session at its first poll of each.
	cfg2 := fastConfig(client, "w2", rec.poller("w2"))
	cfg2.Observer = obs2
	start(t, cfg2)
	var gaps []time.Duration
	require.Eventually(t, func() bool {
		gaps = append(gaps, obs2.take()...)
		own := owners(t, client, ids)
		moved := 0
		for _, w := range own {
			if w == "w2" {
				moved++
			}
		}
		return moved > 0 && len(gaps) == moved
	}, 10*time.Second, 10*time.Millisecond)
	for _, g := range gaps {
		require.GreaterOrEqual(t, g, time.Duration(0))
		require.Less(t, g, 900*time.Millisecond, "a graceful handoff takes less than a TTL: %v", gaps)
	}
	require.Empty(t, obs1.take(), "w1 acquired nothing")

	// w1 leaves gracefully: w2 takes the rest and reports their gaps too.
	w1.stop(t)
	require.Eventually(t, func() bool {
		gaps = append(gaps, obs2.take()...)
		return len(gaps) == len(ids)
	}, 10*time.Second, 10*time.Millisecond, "one gap per session handed to w2")
	rec.check(t)
}
