package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAcquiredAt(t *testing.T) {
	now := time.UnixMilli(1_795_000_000_000)
	owner := func(made time.Time) string {
		return "w1#inc." + fmtMade(made) + "0123456789abcdef"
	}
	tests := []struct {
		name   string
		token  int64
		owner  string
		want   time.Time
		wantOK bool
	}{
		{"the record's token", now.Add(-3 * time.Second).UnixMicro(), owner(now.Add(-time.Hour)), now.Add(-3 * time.Second), true},
		{"no record: the owner value's time", 0, owner(now.Add(-5 * time.Second)), now.Add(-5 * time.Second), true},
		{"a token that does not tell (a counter)", 42, owner(now.Add(-5 * time.Second)), now.Add(-5 * time.Second), true},
		{"an owner value without a time", 0, "w1#inc.0123456789abcdef", time.Time{}, false},
		{"made a little ahead of the server: now", 0, owner(now.Add(500 * time.Millisecond)), now, true},
		{"made far ahead of the server", 0, owner(now.Add(2 * time.Second)), time.Time{}, false},
		{"made more than a day ago", 0, owner(now.Add(-25 * time.Hour)), time.Time{}, false},
		{"no lease", 0, "", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := acquiredAt(tt.token, tt.owner, now)
			require.Equal(t, tt.wantOK, ok)
			require.True(t, tt.want.Equal(got), "got %v, want %v", got, tt.want)
		})
	}
}

// fmtMade is the 12 hex digits of an owner value's time (lease.newOwner).
func fmtMade(at time.Time) string {
	const digits = "0123456789abcdef"
	ms := uint64(at.UnixMilli())
	out := make([]byte, 12)
	for i := 11; i >= 0; i-- {
		out[i] = digits[ms&15]
		ms >>= 4
	}
	return string(out)
}
