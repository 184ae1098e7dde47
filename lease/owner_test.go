package lease

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseOwner(t *testing.T) {
	tests := []struct {
		name string
		give string
		want Owner
	}{
		{name: "with incarnation", give: "w1#0123abcd4567ef89.a1b2c3d4e5f60718",
			want: Owner{Holder: "w1", Incarnation: "0123abcd4567ef89", Nonce: "a1b2c3d4e5f60718"}},
		{name: "before incarnations", give: "w1#a1b2c3d4e5f60718", want: Owner{Holder: "w1", Nonce: "a1b2c3d4e5f60718"}},
		{name: "with the time it was made", give: "w1#inc.019abc0de123a1b2c3d4e5f60718",
			want: Owner{Holder: "w1", Incarnation: "inc", Nonce: "019abc0de123a1b2c3d4e5f60718", Made: time.UnixMilli(0x019abc0de123)}},
		{name: "a time that is not hex", give: "w1#inc.019abc0dexyza1b2c3d4e5f60718",
			want: Owner{Holder: "w1", Incarnation: "inc", Nonce: "019abc0dexyza1b2c3d4e5f60718"}},
		{name: "dotted holder", give: "host.example.com-1#inc.n", want: Owner{Holder: "host.example.com-1", Incarnation: "inc", Nonce: "n"}},
		{name: "dotted holder, no incarnation", give: "host.example.com-1#n", want: Owner{Holder: "host.example.com-1", Nonce: "n"}},
		{name: "holder alone", give: "w1", want: Owner{Holder: "w1"}},
		{name: "empty", give: "", want: Owner{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ParseOwner(tt.give))
			require.Equal(t, tt.want.Holder, HolderOf(tt.give))
			require.Equal(t, tt.want.Incarnation, IncarnationOf(tt.give))
		})
	}
}

// TestOwnerCarriesIncarnation (issue 10, item 7): an owner value names the
// incarnation that acquired it, so that status can tell a lease held by the
// live process from one a crashed predecessor with the same id still holds;
// another holder's value, returned by acquire.lua, still yields the holder
// id; owner values stay unique per acquisition.
func TestOwnerCarriesIncarnation(t *testing.T) {
	f := newFixture(t)
	withInc := func(inc string) func(*Config) { return func(c *Config) { c.Incarnation = inc } }
	old := f.manager(t, "w1", withInc("aaaa1111"))
	ra := acquireOne(t, old, "s1")
	require.NotNil(t, ra.Lease)
	require.Regexp(t, regexp.MustCompile(`^w1#aaaa1111\.[0-9a-f]{28}$`), ra.Lease.Owner())
	require.Equal(t, Owner{Holder: "w1", Incarnation: "aaaa1111", Nonce: ra.Lease.Owner()[len("w1#aaaa1111."):], Made: f.clock.Now().Truncate(time.Millisecond)},
		ParseOwner(ra.Lease.Owner()), "the manager's clock when the value was made")

	restarted := f.manager(t, "w1", withInc("bbbb2222"))
	rb := acquireOne(t, restarted, "s1")
	require.Nil(t, rb.Lease, "a new incarnation does not get its predecessor's lease")
	require.Equal(t, "w1", rb.Holder)
	h, err := restarted.Inspect(context.Background(), []string{"s1"})
	require.NoError(t, err)
	require.Equal(t, "aaaa1111", IncarnationOf(h[0].Owner))

	rc := acquireOne(t, restarted, "s2")
	require.NotNil(t, rc.Lease)
	require.NotEqual(t, ra.Lease.Owner()[len("w1#aaaa1111."):], rc.Lease.Owner()[len("w1#bbbb2222."):])

	plain := f.manager(t, "w2")
	rp := acquireOne(t, plain, "s3")
	require.Regexp(t, regexp.MustCompile(`^w2#[0-9a-f]{28}$`), rp.Lease.Owner(), "no incarnation: holder#nonce")

	for _, bad := range []string{"a.b", "a#b", "a-b"} {
		_, err := New(Config{Client: f.rdb, Holder: "w", Incarnation: bad})
		require.ErrorIs(t, err, ErrConfig, bad)
	}
}
