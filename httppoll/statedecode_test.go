package httppoll

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stateSamples are States as the Poller writes them, and some it could.
func stateSamples() []State {
	at := time.Date(2026, 11, 24, 3, 39, 43, 108959718, time.UTC)
	return []State{
		{},
		{Version: StateVersion, Worker: "w1", URLHash: urlHash("http://127.0.0.1/s/1"), Polled: at, Status: 200, LatencyMS: 0.523,
			ETag: `"v1"`, BodySHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", LastSuccess: at, Changed: at},
		{Version: StateVersion, Worker: "worker-ü", Polled: at, Status: 503, Error: "server", LatencyMS: 1234.5, ETag: `W/"a\"b\\c"`,
			LastModified: "Tue, 24 Nov 2026 03:39:43 GMT", Failures: 7, FailingSince: at.Add(-time.Hour), Changed: at, BackoffMS: 127000},
		{Version: 2, Status: 0, Error: "timeout", LatencyMS: 10000, Failures: 1, FailingSince: at},
		{Version: StateVersion, ETag: "<&>\u2028", Worker: "\x01"}, // escaped by encoding/json: the slow path
	}
}

// TestDecodeStateFastMatchesJSON: every sample round-trips, and the fast
// path decodes what the Poller writes without encoding/json.
func TestDecodeStateFastMatchesJSON(t *testing.T) {
	for i, st := range stateSamples() {
		data := st.encode()
		var want State
		require.NoError(t, json.Unmarshal(data, &want))
		got, ok := decodeStateFast(data)
		if i < 4 {
			require.True(t, ok, "sample %d: %s", i, data)
		}
		if ok {
			require.Equal(t, want, got, "sample %d: %s", i, data)
		}
	}
}

func TestDecodeStateFastRefusesWhatItDoesNotHandle(t *testing.T) {
	for _, in := range []string{
		``, `{`, `{}x`, ` {}`, `{"v":1,}`, `{"v":1 }`, `{"V":1}`, `{"x":1}`, `{"v":null}`, `{"v":1.0}`, `{"v":1e2}`, `{"v":01}`,
		`{"v":+1}`, `{"v":-}`, `{"v":1.}`, `{"latency_ms":.5}`, `{"worker":"a\nb"}`, `{"worker":"\u0041"}`, `{"worker":"a` + "\x01" + `"}`,
		`{"worker":"` + "\xff" + `"}`, `{"polled":"yesterday"}`, `{"v":99999999999999999999}`, `{"worker":"a"`, `{"worker":"a\`,
	} {
		_, ok := decodeStateFast([]byte(in))
		require.False(t, ok, "%q", in)
	}
}

// FuzzDecodeStateFast: whatever the fast path accepts, encoding/json
// decodes to the same State without error.
func FuzzDecodeStateFast(f *testing.F) {
	for _, st := range stateSamples() {
		f.Add(st.encode())
	}
	f.Add([]byte(`{"v":1,"etag":"\"x\"","failures":-0,"latency_ms":1e-3}`))
	// Beyond 32 bits: an int field overflows on 386, backoff_ms (int64) not.
	f.Add([]byte(`{"v":1,"status":3000000000,"backoff_ms":5000000000}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeStateFast(data)
		if !ok {
			return
		}
		var want State
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		require.Equal(t, want, got, "%q", data)
	})
}

func BenchmarkDecodeState(b *testing.B) {
	data := stateSamples()[1].encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeState(data); err != nil {
			b.Fatal(err)
		}
	}
}
