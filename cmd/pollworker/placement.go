package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/poller"
)

// newFleetReader returns the read model of the fleet (package fleet) for
// the admin commands: status, explain and check say what they say from
// it, with the workers' defaults (balance slack, first-poll bound) and the
// HTTP poller's saved state for backoffs. leaseTTL is the workers'
// --lease-ttl (explain's settle rule).
func newFleetReader(a admin, leaseTTL time.Duration) (*fleet.Reader, error) {
	return fleet.NewReader(a.client, a.keys, fleetOptions(leaseTTL))
}

// fleetOptions are the fleet.Options of the workers this binary runs.
func fleetOptions(leaseTTL time.Duration) fleet.Options {
	return fleet.Options{BalanceSlack: poller.DefaultBalanceSlack, LeaseTTL: leaseTTL, FirstPollBound: poller.FirstPollBound, Backoff: httpBackoff}
}

// httpBackoff reads the error backoff out of the HTTP poller's saved
// state.
func httpBackoff(data []byte) (fleet.Backoff, bool) {
	st, err := httppoll.DecodeState(data)
	if err != nil {
		return fleet.Backoff{}, false
	}
	return fleet.Backoff{Failures: st.Failures, Last: outcomeText(&st), Polled: st.Polled, Wait: st.Backoff()}, true
}

// placementMetrics exports what the placement rules leave unplaced.
func placementMetrics(c *poller.Coordinator) []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pollworker_sessions_unplaceable",
		Help: "Active sessions whose selector no live worker's labels match: polled by nobody until one joins. A fleet-wide figure, the same on every worker (use max)."},
		func() float64 { return float64(c.Unplaceable()) })}
}
