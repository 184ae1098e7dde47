package session

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestStoreRefusesURLsThePollerCannotPoll: by default a Store writes only
// absolute http or https URLs with a host (issue 10, item 8: `sessions add`
// stored "not a url", ftp://, file://, javascript: and relative paths).
func TestStoreRefusesURLsThePollerCannotPoll(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "words", give: "not a url", want: "url must be an absolute http or https URL with a host; it has no scheme"},
		{name: "ftp", give: "ftp://example.com/f", want: `its scheme is "ftp"`},
		{name: "file", give: "file:///etc/passwd", want: `its scheme is "file"`},
		{name: "javascript", give: "javascript:alert(1)", want: `its scheme is "javascript"`},
		{name: "relative path", give: "/relative/path", want: "it has no scheme"},
		{name: "no host", give: "http://", want: "url is an http URL without host"},
		{name: "empty host", give: "https:///path", want: "url is an https URL without host"},
		{name: "port only", give: "http://:80/", want: "it has no host"},
		{name: "opaque", give: "http:example.com", want: "it has no host"},
		{name: "upper-case scheme", give: "HTTP://", want: "url is an http URL without host"},
		{name: "password is not shown", give: "ftp://u:hunter2@h/", want: `its scheme is "ftp"`},
		{name: "credentials", give: "https://u:hunter2@example.com/a", want: "url holds credentials (user@ or user:password@ before the host): put them in a worker-side profile"},
		{name: "user only", give: "https://hunter2@example.com/a", want: "url holds credentials"},
		{name: "a host:port taken for a user", give: "http://127.0.0.1:18410@127.0.0.1:18411/", want: "url holds credentials"},
		{name: "port 0", give: "http://example.com:0/", want: `its port "0" is not 1-65535`},
		{name: "port too large", give: "http://example.com:99999999/", want: `its port "99999999" is not 1-65535`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := Session{ID: "s1", URL: tt.give, Interval: Duration(time.Second)}
			err := s.Put(ctx, sess)
			require.ErrorIs(t, err, ErrMalformed)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "hunter2")
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "url", fe.Field)
			require.ErrorIs(t, s.PutMany(ctx, []Session{sessFor("s0"), sess}), ErrMalformed)
		})
	}
	require.Empty(t, m.Keys(), "nothing written")

	for _, u := range []string{"http://example.com", "https://example.com:8443/a?b=c#d", "http://127.0.0.1:1/", "http://[::1]:80/"} {
		require.NoError(t, s.Put(ctx, Session{ID: "ok", URL: u, Interval: Duration(time.Second)}), u)
	}
}

func sessFor(id string) Session { return sess(id) }

// TestWithURLCheck: an embedder may poll other targets.
func TestWithURLCheck(t *testing.T) {
	_, _, any := newMini(t, WithURLCheck(nil))
	ctx := ctxT(t)
	require.NoError(t, any.Put(ctx, Session{ID: "q", URL: "queue depth of orders", Interval: Duration(time.Minute)}))
	require.NoError(t, any.PutMany(ctx, []Session{{ID: "r", URL: "redis://cache:6379/0", Interval: Duration(time.Minute)}}))
	got, err := any.Get(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, "queue depth of orders", got.URL)
	// Validate still applies.
	require.ErrorIs(t, any.Put(ctx, Session{ID: "q", URL: " ", Interval: Duration(time.Minute)}), ErrMalformed)

	_, _, own := newMini(t, WithURLCheck(func(u string) error {
		if !strings.HasPrefix(u, "mqtt://") {
			return errors.New("must be an mqtt:// topic")
		}
		return nil
	}))
	require.NoError(t, own.Put(ctx, Session{ID: "m", URL: "mqtt://broker/t", Interval: Duration(time.Minute)}))
	err = own.Put(ctx, Session{ID: "m", URL: "http://example.com/", Interval: Duration(time.Minute)})
	require.ErrorIs(t, err, ErrMalformed)
	require.EqualError(t, err, `put "m": session: malformed: url must be an mqtt:// topic`)
}

// TestValidateIntervalRange: intervals run from MinInterval to MaxInterval
// (issue 10, item 8: --interval 100000h was accepted).
func TestValidateIntervalRange(t *testing.T) {
	tests := []struct {
		name string
		give time.Duration
		want string // "" if valid
	}{
		{name: "minimum", give: MinInterval},
		{name: "maximum", give: MaxInterval},
		{name: "below minimum", give: MinInterval - time.Nanosecond, want: "session: malformed: interval 9.999999ms is below the minimum 10ms"},
		{name: "above maximum", give: MaxInterval + time.Nanosecond, want: "session: malformed: interval 24h0m0.000000001s is above the maximum 24h0m0s"},
		{name: "typo", give: 100000 * time.Hour, want: "session: malformed: interval 100000h0m0s is above the maximum 24h0m0s"},
		{name: "negative", give: -time.Second, want: "session: malformed: interval -1s is negative"},
		{name: "zero", give: 0, want: "session: malformed: interval missing or zero (a session has exactly one of interval and schedule)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Session{ID: "s1", URL: "http://h", Interval: Duration(tt.give)}.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.EqualError(t, err, tt.want)
		})
	}
}

// TestFieldErrorMessages: one prefix, then the field and the rule (issue 10,
// item 12: "session: malformed: id: keyspace: invalid id: ...").
func TestFieldErrorMessages(t *testing.T) {
	err := Session{ID: "a b", URL: "http://h", Interval: Duration(time.Second)}.Validate()
	require.EqualError(t, err, `session: malformed: id "a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)`)
	require.ErrorIs(t, err, ErrMalformed)
	require.ErrorIs(t, err, keyspace.ErrInvalidID)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, FieldError{Field: "id", Reason: `"a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)`}, FieldError{Field: fe.Field, Reason: fe.Reason})

	err = Session{ID: "s1", URL: "https://u:hunter2@bad host/", Interval: Duration(time.Second)}.Validate()
	require.EqualError(t, err, `session: malformed: url is not a valid https URL: invalid character " " in host name`)
	require.EqualError(t, Session{ID: "s1", Interval: Duration(time.Second)}.Validate(), "session: malformed: url missing or blank")
}

// TestKeyspaceURLRule: a Store made with WithKeyspaceURLRule applies the
// URL rule stored in the keyspace: http by default (what the built-in
// poller can GET), any non-blank target once set to any (issue 22: the CLI
// could not manage an embedder's serial:/dev/ttyUSB0 sessions).
func TestKeyspaceURLRule(t *testing.T) {
	m, c, s := newMini(t, WithKeyspaceURLRule())
	ctx := ctxT(t)
	serial := Session{ID: "tty-1", URL: "serial:/dev/ttyUSB0", Interval: Duration(time.Second)}

	r, err := s.URLRule(ctx)
	require.NoError(t, err)
	require.Equal(t, URLRuleHTTP, r)
	require.ErrorIs(t, s.Put(ctx, serial), ErrMalformed)
	require.ErrorIs(t, s.PutMany(ctx, []Session{sess("a"), serial}), ErrMalformed)
	require.False(t, m.Exists(keys.Session("tty-1")))

	require.NoError(t, s.SetURLRule(ctx, URLRuleAny))
	require.Equal(t, "any", m.HGet(keys.SessionSettings(), "url-rule"))
	require.NoError(t, s.Put(ctx, serial))
	require.NoError(t, s.PutMany(ctx, []Session{sess("a"), {ID: "tty-2", URL: "serial:/dev/ttyUSB1", Interval: Duration(time.Second)}}))
	got, err := s.Get(ctx, "tty-2")
	require.NoError(t, err)
	require.Equal(t, "serial:/dev/ttyUSB1", got.URL)
	require.ErrorIs(t, s.Put(ctx, Session{ID: "blank", URL: " ", Interval: Duration(time.Second)}), ErrMalformed, "any is not blank")

	// A store without the option keeps its own check.
	plain, err := NewStore(c, keys)
	require.NoError(t, err)
	require.ErrorIs(t, plain.Put(ctx, serial), ErrMalformed)

	require.ErrorIs(t, s.SetURLRule(ctx, "bogus"), ErrBadURLRule)
	m.HSet(keys.SessionSettings(), "url-rule", "ftp")
	_, err = s.URLRule(ctx)
	require.ErrorIs(t, err, ErrBadURLRule)
	require.ErrorIs(t, s.Put(ctx, sess("b")), ErrBadURLRule, "a bad stored rule refuses writes")
	require.NoError(t, s.SetURLRule(ctx, URLRuleHTTP))
	require.NoError(t, s.Put(ctx, sess("b")))
}

func TestParseURLRule(t *testing.T) {
	for _, tt := range []struct {
		give string
		want URLRule
		err  bool
	}{{"http", URLRuleHTTP, false}, {"any", URLRuleAny, false}, {"", "", true}, {"HTTP", "", true}, {"none", "", true}} {
		got, err := ParseURLRule(tt.give)
		require.Equal(t, tt.want, got, tt.give)
		require.Equal(t, tt.err, err != nil, tt.give)
	}
}
