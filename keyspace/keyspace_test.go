package keyspace

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeys(t *testing.T) {
	s := Space{}
	require.Equal(t, "poll:lease:{s1}", s.Lease("s1"))
	require.Equal(t, "poll:fence:{s1}", s.Fence("s1"))
	require.Equal(t, "poll:state:{s1}", s.State("s1"))
	require.Equal(t, Slot(s.Lease("s1")), Slot(s.State("s1")))
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
	require.ErrorIs(t, Space{Prefix: "a*"}.Validate(), ErrInvalidID)
	require.ErrorIs(t, Space{Prefix: "x", SessionPrefix: "x"}.Validate(), ErrOverlap)
}

// TestSpaceValidateOverlap: a session prefix that can build a worker key, or
// the reverse, is refused (issue 10, item 9: --session-prefix poll:sessions
// wrote session 7 at poll:sessions:7, the key of index bucket 7).
func TestSpaceValidateOverlap(t *testing.T) {
	tests := []struct {
		name          string
		prefix, sprfx string
		ok            bool
	}{
		{name: "defaults", ok: true},
		{name: "distinct", prefix: "p", sprfx: "q", ok: true},
		{name: "one extends the other without colon", prefix: "poll", sprfx: "pollx", ok: true},
		{name: "reverse without colon", prefix: "sessionx", sprfx: "session", ok: true},
		{name: "differ after colon", prefix: "app:poll", sprfx: "app:session", ok: true},
		{name: "equal", prefix: "x", sprfx: "x"},
		{name: "equal to the default session prefix", prefix: "session"},
		{name: "session prefix inside the index", sprfx: "poll:sessions"},
		{name: "session prefix inside the worker keys", sprfx: "poll:x"},
		{name: "session prefix inside, trailing colon", sprfx: "poll:"},
		{name: "key prefix inside the sessions", prefix: "session:poll"},
		{name: "key prefix with a trailing colon", prefix: "poll:", sprfx: "poll"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Space{Prefix: tt.prefix, SessionPrefix: tt.sprfx}
			err := s.Validate()
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrOverlap)
			require.Contains(t, err.Error(), OverlapRule)
		})
	}
}

// TestOverlapMeansCollision checks Overlap against the keys themselves: for
// these overlapping prefixes some session id builds a worker key, for
// disjoint ones none does. (Overlap is stricter than today's key kinds: it
// also refuses "a" with "a:b:c", since all of "a:" belongs to the workers.)
func TestOverlapMeansCollision(t *testing.T) {
	pairs := [][2]string{{"poll", "session"}, {"poll", "poll:sessions"}, {"poll", "pollx"}, {"session:poll", "session"}, {"a:b", "a"}, {"a", "a:sessions"}}
	for _, p := range pairs {
		s := Space{Prefix: p[0], SessionPrefix: p[1]}
		worker := []string{s.SessionBucket(7), s.NodeIndex(), s.Node("n1"), s.Results(), s.SessionRev()}
		collides := false
		for _, k := range worker {
			// The session id that would build k, if any.
			if id, ok := strings.CutPrefix(k, s.sessionPrefix()+":"); ok && ValidateID(id) == nil {
				require.Equal(t, k, s.Session(id))
				collides = true
			}
		}
		require.Equal(t, Overlap(p[0], p[1]), collides, "%q and %q", p[0], p[1])
	}
}

func TestHashTagPrefixRefused(t *testing.T) {
	// A hash tag in a prefix would put every key in one slot and override
	// the {session} tag of the lease keys.
	for _, p := range []string{"{poll}", "a{b}c", "{"} {
		require.ErrorIs(t, Space{Prefix: p}.Validate(), ErrInvalidID, p)
		require.ErrorIs(t, Space{SessionPrefix: p}.Validate(), ErrInvalidID, p)
	}
}

func TestIDError(t *testing.T) {
	err := ValidateID("a b")
	var ie *IDError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "a b", ie.ID)
	require.Equal(t, `"a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)`, ie.Reason)
	require.EqualError(t, err, `keyspace: invalid id: "a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)`)
	// Not ASCII: the character, not its first byte read as Latin-1 ('Ã').
	require.ErrorContains(t, ValidateID("café"), `"café" has 'é' (not ASCII) at 3`)
	require.ErrorContains(t, ValidateID("a\xffb"), `"a\xffb" has byte 0xff at 1`)
}

func TestSlot(t *testing.T) {
	// Vectors from the Redis Cluster specification.
	require.Equal(t, uint16(12739), Slot("123456789"))
	require.Equal(t, Slot("foo"), Slot("{foo}bar"))
	require.Equal(t, Slot("poll:lease:{s1}"), Slot("poll:fence:{s1}"))
	require.Equal(t, Slot("a{}b"), crc16("a{}b")%16384)
}

func TestEpochKeyLivesInItsSlot(t *testing.T) {
	var s Space
	seen := map[string]bool{}
	for _, slot := range []uint16{0, 1, 7, 8000, 16383} {
		k := s.Epoch(slot)
		require.Equal(t, slot, Slot(k), k)
		require.False(t, seen[k])
		seen[k] = true
	}
	require.Equal(t, Slot(s.Lease("api-1")), Slot(s.Epoch(Slot(s.Lease("api-1")))))
	require.Equal(t, "team:epoch:{"+slotTags()[0]+"}", Space{Prefix: "team"}.Epoch(0))
}

func TestLeaseMatchAndSession(t *testing.T) {
	for _, s := range []Space{{}, {Prefix: "app"}} {
		key := s.Lease("s-1")
		id, ok := s.LeaseSession(key)
		require.True(t, ok)
		require.Equal(t, "s-1", id)
		ok, err := path.Match(s.LeaseMatch(), key)
		require.NoError(t, err)
		require.True(t, ok, "%s matches %s", s.LeaseMatch(), key)
		_, ok = s.LeaseSession(s.Fence("s-1"))
		require.False(t, ok)
	}
}

// TestOldLayoutDerivedFromTheRecord pins what acquire.lua and inspect.lua
// rely on: the fencing counter and handoff mark of the layout before the
// fencing record are the record's name with ":fencing:" replaced (the
// scripts take the prefix before the last ":fencing:" and the tag after
// it), whatever the prefix and the session id.
func TestOldLayoutDerivedFromTheRecord(t *testing.T) {
	for _, tt := range []struct {
		space   Space
		session string
	}{
		{Space{}, "s1"},
		{Space{Prefix: "a:fencing:b"}, "x:fencing:y"},
		{Space{Prefix: "team-a"}, "election:leader"},
	} {
		rec := tt.space.Fencing(tt.session)
		i := strings.LastIndex(rec, ":fencing:{")
		require.GreaterOrEqual(t, i, 0, rec)
		p, tag := rec[:i], rec[i+len(":fencing:"):]
		require.Equal(t, tt.space.Fence(tt.session), p+":fence:"+tag)
		require.Equal(t, tt.space.Released(tt.session), p+":released:"+tag)
	}
}
