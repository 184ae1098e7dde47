package nodes

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLabels(t *testing.T) {
	l, err := ParseLabels(" zone=eu-1, egress=static ")
	require.NoError(t, err)
	require.Equal(t, "egress=static,zone=eu-1", l.String())
	for _, tc := range []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"zone=eu-1", true},
		{"egress=static,zone=eu-1", true},
		{"zone=eu-2", false},
		{"zone=eu-1,rack=7", false},
		{"zone=eu-1,", false}, // invalid: matches nothing
	} {
		require.Equal(t, tc.want, l.MatchesSelector(tc.sel), tc.sel)
	}
	for _, bad := range []string{"zone", "=x", "zone=", "a=b,a=c", "a|b=c", "a=b c"} {
		_, err := ParseLabels(bad)
		require.Error(t, err, bad)
	}
	c, err := CanonicalSelector("zone=eu-1,a=b")
	require.NoError(t, err)
	require.Equal(t, "a=b,zone=eu-1", c)
	require.Error(t, Labels{"a b": "c"}.Validate())
}
