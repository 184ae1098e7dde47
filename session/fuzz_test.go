package session

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecode checks that Decode never panics, that whatever it accepts
// passes Validate, and that an accepted session survives Encode and Decode
// unchanged. The seeds are in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, id string, raw []byte) {
		s, err := Decode(id, raw)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		require.NoError(t, s.Validate())
		require.Equal(t, id, s.ID)
		b, err := Encode(s)
		if err != nil {
			// Re-encoding may escape characters (< becomes \u003c) and
			// outgrow the limit; nothing else may fail.
			require.ErrorContains(t, err, "encoded session has")
			return
		}
		again, err := Decode(id, b)
		require.NoError(t, err, "re-decoding %s", b)
		require.Equal(t, s, again)
		require.False(t, strings.Contains(string(b), `"paused":false`))
	})
}
