package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestStatusPageFailingSessions: the page lists the failing sessions the
// worker's poller reports, at most pageFailingMax of them, with timestamps
// in UTC and the zone named; without a poller's view there is no section.
func TestStatusPageFailingSessions(t *testing.T) {
	since := time.Date(2026, 11, 24, 2, 3, 4, 0, time.FixedZone("CET", 3600))
	var failing []failingSession
	for i := range pageFailingMax + 20 {
		failing = append(failing, failingSession{Session: fmt.Sprintf("s%03d", i), Failures: 3, Error: "timeout",
			Since: since, LastPoll: since.Add(time.Minute), Token: 42})
	}
	failing[0].Status, failing[0].Error, failing[0].Message = 503, "server", "httppoll: server error: 503 Service Unavailable (expect 200-399)"
	page := func(failing func() []failingSession) string {
		h := statusPageConfig{self: "w1", ready: func() bool { return true },
			read:   func(context.Context) (clusterStatus, error) { return clusterStatus{}, nil },
			events: newRecentEvents(1), failing: failing}.handler()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		require.Equal(t, http.StatusOK, w.Code)
		return w.Body.String()
	}

	body := page(func() []failingSession { return failing })
	require.Contains(t, body, "<h2>Failing sessions polled by this worker (120)</h2>")
	require.Equal(t, pageFailingMax, strings.Count(body, `<tr class="failing">`))
	require.Contains(t, body, `<tr class="failing"><td>s000</td><td>3</td><td>503</td><td class="message">httppoll: server error: 503 Service Unavailable (expect 200-399)</td><td>2026-11-24 01:03:04 UTC</td><td>2026-11-24 01:04:04 UTC</td><td>42</td></tr>`)
	require.Contains(t, body, `<tr class="failing"><td>s001</td><td>3</td><td>timeout</td>`)
	require.NotContains(t, body, "<td>s100</td>")
	require.Contains(t, body, "… and 20 more")

	body = page(func() []failingSession { return nil })
	require.Contains(t, body, `<p id="failing-none">`)
	require.NotContains(t, body, `<table id="failing">`)

	body = page(nil)
	require.NotContains(t, body, "Failing sessions")
}

// TestStatusPageFailingSessionsOfTheFleet: each worker publishes its
// failing sessions with its timeline (publishFailing); the page lists
// every live worker's, longest failing first, with the worker polling
// each; a value that does not decode or a key of another type is skipped
// and left alone; without a fleet read the page falls back to its own.
func TestStatusPageFailingSessionsOfTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	keys := keyspace.Space{}
	since := time.Date(2026, 11, 24, 2, 0, 0, 0, time.UTC)
	pipe := c.Pipeline()
	publishFailing(ctx, pipe, keys.Failing("w1"), []failingSession{
		{Session: "a", Failures: 2, Status: 503, Error: "server", Message: "httppoll: server error: 503", Since: since.Add(time.Minute), Token: 7}}, time.Minute)
	publishFailing(ctx, pipe, keys.Failing("w2"), []failingSession{
		{Session: "b", Failures: 9, Error: "refused", Since: since, Token: 8}}, time.Minute)
	publishFailing(ctx, pipe, keys.Failing("w3"), nil, time.Minute)
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, keys.Failing("w4"), "{not json", 0).Err())
	require.NoError(t, c.LPush(ctx, keys.Failing("w5"), "x").Err())

	rows, total, skipped, err := readFleetFailing(ctx, c, keys, []string{"w1", "w2", "w3", "w4", "w5", "gone"})
	require.NoError(t, err)
	require.Equal(t, 2, total)
	require.Equal(t, 2, skipped)
	require.Equal(t, []string{"w2/b", "w1/a"}, []string{rows[0].Worker + "/" + rows[0].Session, rows[1].Worker + "/" + rows[1].Session})
	require.Equal(t, "{not json", c.Get(ctx, keys.Failing("w4")).Val(), "never deleted")

	page := func(fleet func(context.Context, clusterStatus) ([]failingSession, int, error)) string {
		h := statusPageConfig{self: "w1", ready: func() bool { return true },
			read:   func(context.Context) (clusterStatus, error) { return clusterStatus{}, nil },
			events: newRecentEvents(1), failing: func() []failingSession { return rows[1:] }, fleetFailing: fleet}.handler()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		require.Equal(t, http.StatusOK, w.Code)
		return w.Body.String()
	}
	// This worker (w1) shows its own from memory, the others' as read.
	body := page(func(context.Context, clusterStatus) ([]failingSession, int, error) { return rows[:1], 1, nil })
	require.Contains(t, body, "<h2>Failing sessions of the fleet (2)</h2>")
	require.Contains(t, body, `<tr class="failing"><td>w2</td><td>b</td><td>9</td><td>refused</td>`)
	require.Contains(t, body, `<tr class="failing"><td>w1</td><td>a</td><td>2</td><td>503</td>`)
	require.Less(t, strings.Index(body, "<td>b</td>"), strings.Index(body, "<td>a</td>"), "longest failing first")

	body = page(func(context.Context, clusterStatus) ([]failingSession, int, error) { return nil, 0, errors.New("down") })
	require.Contains(t, body, "<h2>Failing sessions polled by this worker (1)</h2>")
	require.Contains(t, body, `<tr class="failing"><td>a</td>`)
}
