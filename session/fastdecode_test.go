package session

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeFastPath: whatever the fast path accepts, encoding/json decodes
// to the same document; whatever encoding/json refuses, the fast path
// refuses too. The seeds are in testdata/fuzz/FuzzDecodeFastPath and below.
func FuzzDecodeFastPath(f *testing.F) {
	for _, seed := range fastPathSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast document
		ok := decodeFast(raw, &fast)
		var slow document
		err := json.Unmarshal(raw, &slow)
		if !ok {
			return
		}
		require.NoError(t, err, "the fast path accepted what encoding/json refuses: %q", raw)
		require.Equal(t, slow, fast, "%q", raw)
	})
}

// fastPathSeeds are documents in and just outside the fast path's subset.
var fastPathSeeds = []string{
	`{"id":"session-1","url":"bench://session-1","interval":"1h0m0s"}`,
	`{"url":"http://h","interval":"10s","paused":true,"labels":{"a":"1","b":"2"},"headers":{}}`,
	` { "id" : "x" , "url" : "u" , "interval" : "1s" } `,
	`{"url":"u","schedule":"*/5 * * * *","tz":"Europe/Paris","jitter":"3s","catchup":"all","catchup_window":"1h"}`,
	`{"url":"u","method":"POST","body":"{}","expect":"200-299","profile":"p","selector":"zone=a"}`,
	`{"url":"u","labels":{"a":"1","a":"2"}}`,
	`{"url":"u","url":"v"}`,
	`{"URL":"u"}`,
	`{"url":"\u0075"}`,
	`{"url":"é"}`,
	`{"url":"u","interval":1500}`,
	`{"url":"u","interval":"fast"}`,
	`{"url":"u","paused":null}`,
	`{"url":"u","other":1}`,
	`{"url":"u"}x`,
	`{"url":"u",}`,
	`{}`,
	`{"labels":{"a":1}}`,
	"{\"url\":\"a\tb\"}",
}

// TestDecodeTakesTheFastPathForStoredSessions: what Encode writes (and the
// benchmarks store) is in the fast path's subset, and decodes the same as
// through encoding/json; a value outside it still decodes, through
// encoding/json.
func TestDecodeTakesTheFastPathForStoredSessions(t *testing.T) {
	tests := []Session{
		{ID: "session-1", URL: "bench://session-1", Interval: Duration(time.Hour)},
		{ID: "s2", URL: "http://127.0.0.1:8080/poll/s2", Interval: Duration(30 * time.Second), Paused: true,
			Labels: map[string]string{"env": "bench", "tier": "a"}, Selector: "zone=z1", Method: "POST",
			Headers: map[string]string{"Accept": "application/json"}, Body: "{}", Expect: "200-299", Profile: "p",
			Timeout: Duration(1500 * time.Millisecond)},
		{ID: "s3", URL: "http://h/x", Schedule: "*/5 * * * *", TZ: "Europe/Paris", Jitter: Duration(3 * time.Second),
			CatchUp: "all", CatchUpWindow: Duration(time.Hour)},
	}
	for _, s := range tests {
		t.Run(s.ID, func(t *testing.T) {
			raw, err := Encode(s)
			require.NoError(t, err)
			var fast, slow document
			require.True(t, decodeFast(raw, &fast), "%s", raw)
			require.NoError(t, json.Unmarshal(raw, &slow))
			require.Equal(t, slow, fast)
			got, err := Decode(s.ID, raw)
			require.NoError(t, err)
			require.Equal(t, s, got)
		})
	}

	var doc document
	other := []byte(`{"URL":"http://h","Interval":1500,"labels":{"k":"caf\u00e9"}}`)
	require.False(t, decodeFast(other, &doc))
	got, err := Decode("s4", other)
	require.NoError(t, err)
	require.Equal(t, Session{ID: "s4", URL: "http://h", Interval: Duration(1500 * time.Millisecond), Labels: map[string]string{"k": "café"}}, got)
}
