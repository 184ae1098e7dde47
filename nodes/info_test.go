package nodes

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

func TestDefaultID(t *testing.T) {
	id := DefaultID()
	require.NoError(t, keyspace.ValidateID(id))
	re := regexp.MustCompile(`^([A-Za-z0-9._:@/-]+)-([0-9]+)-([0-9a-f]{8})$`)
	parts := re.FindStringSubmatch(id)
	require.NotNil(t, parts, id)
	nanos, err := strconv.ParseInt(parts[2], 10, 64)
	require.NoError(t, err)
	require.Equal(t, processStart.UnixNano(), nanos)
	require.WithinDuration(t, time.Now(), time.Unix(0, nanos), time.Hour)
	require.True(t, strings.HasPrefix(id, sanitizeHost(hostname())+"-"))

	require.NotEqual(t, id, DefaultID(), "random suffix differs")
}

func TestSanitizeHost(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "plain", give: "worker-1.example.com", want: "worker-1.example.com"},
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
			id := defaultID(tt.give, time.Unix(0, 1700000000123456789), "0123abcd")
			require.NoError(t, keyspace.ValidateID(id))
			require.Equal(t, tt.want+"-1700000000123456789-0123abcd", id)
		})
	}
}
