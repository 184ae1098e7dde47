package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMintedAt(t *testing.T) {
	now := time.UnixMicro(1_700_000_000_000_000)
	for _, tc := range []struct {
		name  string
		token int64
		want  time.Duration // ago
		ok    bool
	}{
		{"a second ago", now.UnixMicro() - 1_000_000, time.Second, true},
		{"plain counter", 42, 0, false},
		{"ahead of the clock", now.UnixMicro() + 5, 0, false},
		{"older than a day", now.UnixMicro() - (25 * time.Hour).Microseconds(), 0, false},
		{"none", 0, 0, false},
	} {
		at, ok := MintedAt(tc.token, now)
		require.Equal(t, tc.ok, ok, tc.name)
		if ok {
			require.Equal(t, tc.want, now.Sub(at), tc.name)
		}
	}
}

func TestParseLossMarker(t *testing.T) {
	now := time.UnixMilli(10_000)
	m := ParseLossMarker("abc:12000")
	require.Equal(t, "abc", m.RunID)
	require.Equal(t, 2*time.Second, m.QuarantineLeft(now))
	require.Zero(t, ParseLossMarker("abc:9000").QuarantineLeft(now))
	require.Zero(t, ParseLossMarker("abc").QuarantineLeft(now))
	require.Equal(t, "abc", ParseLossMarker("abc").RunID)
	require.Equal(t, 2*time.Second, ParseLossMarker("abc:12000:2").QuarantineLeft(now), "a marker of a slot with fencing records only")
}

func TestParseHandoffMark(t *testing.T) {
	for _, tc := range []struct {
		give          string
		ok            bool
		released, due int64
	}{
		{"1000", true, 1000, 0},
		{"1000:2500", true, 1000, 2500},
		{"1000:", true, 1000, 0},
		{"x", false, 0, 0},
		{"1000:y", false, 0, 0},
	} {
		m, ok := ParseHandoffMark(tc.give)
		require.Equal(t, tc.ok, ok, tc.give)
		if !ok {
			continue
		}
		require.Equal(t, tc.released, m.Released.UnixMilli(), tc.give)
		if tc.due == 0 {
			require.True(t, m.NextPoll.IsZero(), tc.give)
		} else {
			require.Equal(t, tc.due, m.NextPoll.UnixMilli(), tc.give)
		}
	}
}
