package nodes

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

func TestDefaultID(t *testing.T) {
	id := DefaultID()
	require.NoError(t, keyspace.ValidateID(id))
	require.Equal(t, sanitizeHost(hostname()), id)
	require.Equal(t, id, DefaultID(), "the same for the whole host: restarts are told apart by the incarnation")

	s := SuffixedID(id)
	require.Regexp(t, `^`+regexp.QuoteMeta(id)+`-[0-9a-f]{4}$`, s)
	require.NoError(t, keyspace.ValidateID(s))
	long := sanitizeHost(strings.Repeat("h", 300))
	require.NoError(t, keyspace.ValidateID(SuffixedID(long)))
}

func TestSanitizeHost(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "plain", give: "worker-1.example.com", want: "worker-1.example.com"},
		{name: "pod name", give: "pollworker-7d9c5b6f4-x2x8q", want: "pollworker-7d9c5b6f4-x2x8q"},
		{name: "empty", give: "", want: "node"},
		{name: "spaces and braces", give: "my host{1}", want: "my-host-1-"},
		{name: "glob and newline", give: "a*?\r\n", want: "a----"},
		{name: "utf8", give: "hôte", want: "h--te"},
		{name: "long", give: strings.Repeat("h", 300), want: strings.Repeat("h", maxHostLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sanitizeHost(tt.give)
			require.Equal(t, tt.want, got)
			require.NoError(t, keyspace.ValidateID(got))
		})
	}
}
