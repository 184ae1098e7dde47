package session

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateRequestFields(t *testing.T) {
	tests := []struct {
		name string
		give Session
		want string // "" for valid
	}{
		{name: "defaults", give: Session{}},
		{name: "post with body", give: Session{Method: "POST", Body: "{}", Headers: map[string]string{"Content-Type": "application/json"}}},
		{name: "every method", give: Session{Method: "DELETE"}},
		{name: "lower-case method", give: Session{Method: "post"}, want: `method "post" is not one of GET, HEAD, POST, PUT, PATCH, DELETE`},
		{name: "unknown method", give: Session{Method: "TRACE"}, want: `method "TRACE" is not one of`},
		{name: "body with GET", give: Session{Body: "x"}, want: "body is not sent with GET: use method POST, PUT, PATCH or DELETE"},
		{name: "body with HEAD", give: Session{Method: "HEAD", Body: "x"}, want: "body is not sent with HEAD"},
		{name: "fencing header", give: Session{Headers: map[string]string{"x-poll-token": "9"}}, want: "headers x-poll-token is a fencing header the worker always sends (X-Poll-*)"},
		{name: "authorization", give: Session{Headers: map[string]string{"Authorization": "Bearer x"}}, want: "headers Authorization holds credentials: put it in a worker-side profile"},
		{name: "host", give: Session{Headers: map[string]string{"Host": "x"}}, want: "headers Host is set by the HTTP transport"},
		{name: "bad name", give: Session{Headers: map[string]string{"A B": "x"}}, want: `headers "A B" is not a valid header name`},
		{name: "bad value", give: Session{Headers: map[string]string{"A": "x\r\nB: y"}}, want: "headers the value of A holds a control character"},
		{name: "expect ok", give: Session{Expect: "200-299,304"}},
		{name: "expect reversed", give: Session{Expect: "299-200"}, want: `expect range "299-200" ends below its start`},
		{name: "expect junk", give: Session{Expect: "2xx"}, want: `expect "2xx" is not a status code from 100 to 599`},
		{name: "expect 600", give: Session{Expect: "600"}, want: `expect "600" is not a status code`},
		{name: "profile", give: Session{Profile: "github.prod_1"}},
		{name: "bad profile", give: Session{Profile: "a b"}, want: `profile "a b" may hold only letters, digits and . _ -`},
		{name: "timeout", give: Session{Timeout: Duration(250 * time.Millisecond)}},
		{name: "timeout of the interval", give: Session{Timeout: Duration(time.Second)}},
		{name: "timeout too short", give: Session{Timeout: Duration(time.Millisecond)}, want: "timeout 1ms is not from 10ms to 5m0s"},
		{name: "negative timeout", give: Session{Timeout: Duration(-time.Second)}, want: "timeout -1s is not from 10ms to 5m0s"},
		{name: "timeout above the interval", give: Session{Timeout: Duration(2 * time.Second)}, want: "timeout 2s is longer than the interval 1s: a poll never lasts longer than its interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.give
			s.ID, s.URL, s.Interval = "s1", "http://example.com/", Duration(time.Second)
			err := s.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestExpectMatch(t *testing.T) {
	tests := []struct {
		expect string
		status int
		want   bool
	}{
		{"", 200, true}, {"", 399, true}, {"", 400, false}, {"", 199, false}, {"", 503, false},
		{"201", 201, true}, {"201", 200, false},
		{"200-299,304", 304, true}, {"200-299,304", 301, false}, {"200-299, 304", 304, true},
		{"401", 401, true},
	}
	for _, tt := range tests {
		s := Session{Expect: tt.expect}
		require.Equal(t, tt.want, s.Expected(tt.status), "expect %q status %d", tt.expect, tt.status)
	}
	require.Equal(t, 0.0, testing.AllocsPerRun(100, func() { ExpectMatch("200-299,304", 304) }))
}

// TestFileRoundTripsRequestFields: export then apply gives back every
// request field.
func TestFileRoundTripsRequestFields(t *testing.T) {
	in := []Session{{ID: "p", URL: "http://example.com/post", Interval: Duration(time.Second),
		Method: "POST", Headers: map[string]string{"Accept": "application/json", "Content-Type": "application/json"},
		Body: "{\"q\": 1}\nline two: yes\n", Expect: "201,300-302", Profile: "github", Timeout: Duration(750 * time.Millisecond)},
		{ID: "g", URL: "http://example.com/", Interval: Duration(time.Second), Method: "HEAD"}}
	for _, format := range []FileFormat{FormatYAML, FormatJSON} {
		var buf bytes.Buffer
		require.NoError(t, EncodeFile(&buf, in, format))
		entries, err := ParseFile(buf.Bytes(), HTTPURL)
		require.NoError(t, err, buf.String())
		require.Len(t, entries, 2)
		for i, e := range entries {
			require.Equal(t, in[i], e.Session, string(format))
		}
	}
}

func TestParseFileRequestProblems(t *testing.T) {
	tests := []struct{ give, want string }{
		{"method: TRACE", `entry 1 (line 2, id a): method "TRACE" is not one of`},
		{"body: x", "body is not sent with GET"},
		{"expect: 2xx", `expect "2xx" is not a status code`},
		{"headers: {X-Poll-Token: '1'}", "headers X-Poll-Token is a fencing header"},
		{"headers: [a]", "headers must be a mapping of strings to strings"},
		{"profile: 'a/b'", `profile "a/b" may hold only`},
		{"timeout: 5", `timeout "5" is not a duration like "5s"`},
		{"timeout: 2s", "timeout 2s is longer than the interval 1s"},
		{"timeout: [1s]", `timeout must be a duration like "5s"`},
	}
	for _, tt := range tests {
		raw := "sessions:\n  - {id: a, url: 'http://x/', interval: 1s}\n"
		raw = raw[:len(raw)-2] + ", " + tt.give + "}\n"
		_, err := ParseFile([]byte(raw), HTTPURL)
		require.Error(t, err, tt.give)
		require.Contains(t, err.Error(), tt.want, tt.give)
	}
}
