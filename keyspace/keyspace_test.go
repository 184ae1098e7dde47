package keyspace

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeys(t *testing.T) {
	s := Space{}
	require.Equal(t, "poll:lease:{s1}", s.Lease("s1"))
	require.Equal(t, "poll:fence:{s1}", s.Fence("s1"))
	require.Equal(t, "poll:node:n1", s.Node("n1"))
	require.Equal(t, "session:s1", s.Session("s1"))
	c := Space{Prefix: "p", SessionPrefix: "q"}
	require.Equal(t, "p:lease:{x}", c.Lease("x"))
	require.Equal(t, "q:x", c.Session("x"))
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		name string
		give string
		ok   bool
	}{
		{"plain", "session-1", true},
		{"uuid", "4f1c2a9e-1b7d-4c1e-9a53-0e9a7f8d7c11", true},
		{"url-ish", "tenant/a:b@c_d.e", true},
		{"empty", "", false},
		{"glob star", "a*", false},
		{"glob question", "a?", false},
		{"glob class", "a[b]", false},
		{"brace", "a{b}", false},
		{"crlf", "a\r\nb", false},
		{"space", "a b", false},
		{"non-ascii", "é", false},
		{"too long", string(make([]byte, MaxIDLen+1)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateID(tt.give)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.True(t, errors.Is(err, ErrInvalidID), "got %v", err)
			}
		})
	}
}

func TestSpaceValidate(t *testing.T) {
	require.NoError(t, Space{}.Validate())
	require.Error(t, Space{Prefix: "a*"}.Validate())
	require.Error(t, Space{Prefix: "x", SessionPrefix: "x"}.Validate())
}

func TestSlot(t *testing.T) {
	// Vectors from the Redis Cluster specification.
	require.Equal(t, uint16(12739), Slot("123456789"))
	require.Equal(t, Slot("foo"), Slot("{foo}bar"))
	require.Equal(t, Slot("poll:lease:{s1}"), Slot("poll:fence:{s1}"))
	require.Equal(t, Slot("a{}b"), crc16("a{}b")%16384)
}
