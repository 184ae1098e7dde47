package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
