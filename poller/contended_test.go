package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestContendedSessionsWaitForTheirHolder(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	newCoordinator := func() *Coordinator {
		c := &Coordinator{cfg: Config{Clock: clk}, view: view{touched: map[string]struct{}{}},
			claims: claims{contended: map[string]contention{}}, news: news{releasedBy: map[string]struct{}{}}}
		c.claims.contended["a1"] = contention{holder: "a", until: clk.Now().Add(10 * time.Second)}
		c.claims.contended["a2"] = contention{holder: "a", until: clk.Now().Add(10 * time.Second)}
		c.claims.contended["b1"] = contention{holder: "b", until: clk.Now().Add(time.Second)}
		return c
	}
	tests := []struct {
		name     string
		released []string      // peers announcing a release
		wait     time.Duration // clock advance before the round
		want     []string      // touched, so asked for again
	}{
		{"nothing happened", nil, 0, nil},
		{"holder a released", []string{"a"}, 0, []string{"a1", "a2"}},
		{"another peer released", []string{"c"}, 0, nil},
		{"b's lease ran out", nil, time.Second, []string{"b1"}},
		{"both", []string{"a"}, time.Second, []string{"a1", "a2", "b1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCoordinator()
			start := clk.Now()
			for _, p := range tt.released {
				c.news.releasedBy[p] = struct{}{}
			}
			clk.Step(tt.wait)
			c.retryContended()
			var got []string
			for id := range c.view.touched {
				got = append(got, id)
				require.NotContains(t, c.claims.contended, id, "a session asked for again is no longer contended")
			}
			require.ElementsMatch(t, tt.want, got)
			require.Len(t, c.claims.contended, 3-len(tt.want))
			require.Empty(t, c.news.releasedBy, "announcements are consumed")
			var earliest time.Time
			for _, ct := range c.claims.contended {
				if earliest.IsZero() || ct.until.Before(earliest) {
					earliest = ct.until
				}
			}
			if !earliest.IsZero() {
				require.Equal(t, earliest.Add(retrySlack), c.claims.retryAt, "a round is asked for when the first remaining lease expires")
			}
			clk.SetTime(start)
		})
	}
}
