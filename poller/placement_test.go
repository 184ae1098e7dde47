package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/session"
)

// TestSelectorsPlaceOnlyOnMatchingWorkers: sessions with selector
// zone=eu go only to the worker labelled zone=eu, and those of zone=mars
// (no such worker) to nobody, counted by Unplaceable; a session whose
// selector changes to another zone is stopped and moves. The recorder
// fails the test if a session is polled by two workers at once.
func TestSelectorsPlaceOnlyOnMatchingWorkers(t *testing.T) {
	client, store := freshStore(t)
	ctx := context.Background()
	put := func(id, sel string) {
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://127.0.0.1:1/" + id,
			Interval: session.Duration(100 * time.Millisecond), Selector: sel}))
	}
	var eu, us, mars []string
	for i := range 20 {
		eu, us, mars = append(eu, fmt.Sprintf("eu-%d", i)), append(us, fmt.Sprintf("us-%d", i)), append(mars, fmt.Sprintf("mars-%d", i))
		put(eu[i], "zone=eu")
		put(us[i], "zone=us")
		put(mars[i], "zone=mars")
	}
	rec := newRecorder()
	weu := fastConfig(client, "weu", rec.poller("weu"))
	weu.Labels = map[string]string{"zone": "eu"}
	wus := fastConfig(client, "wus", rec.poller("wus"))
	wus.Labels = map[string]string{"zone": "us", "tier": "1"}
	reu, rus := start(t, weu), start(t, wus)
	all := append(append(append([]string(nil), eu...), us...), mars...)
	require.Eventually(t, func() bool {
		own := owners(t, client, all)
		for _, id := range eu {
			if own[id] != "weu" {
				return false
			}
		}
		for _, id := range us {
			if own[id] != "wus" {
				return false
			}
		}
		return len(own) == len(eu)+len(us)
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, len(mars), reu.c.Unplaceable())
	require.Equal(t, len(mars), rus.c.Unplaceable())

	// eu-0 moves to the us zone: its eu holder stops it, the us worker
	// takes it.
	put(eu[0], "tier=1,zone=us")
	require.Eventually(t, func() bool { return owners(t, client, eu[:1])[eu[0]] == "wus" }, 10*time.Second, 20*time.Millisecond)
	rec.check(t)
	for _, id := range mars {
		require.Zero(t, rec.polled(id), id)
	}
	for _, id := range eu[1:] {
		require.Equal(t, "weu", rec.lastPoller()[id], id)
	}
}
