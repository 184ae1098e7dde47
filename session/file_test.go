package session

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFile(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name string
		give string
		want []Entry
	}{
		{name: "empty", give: "", want: []Entry{}},
		{name: "comments only", give: "# nothing yet\n", want: []Entry{}},
		{name: "null list", give: "sessions:\n", want: []Entry{}},
		{name: "empty list", give: "sessions: []\n", want: []Entry{}},
		{name: "yaml", give: `sessions:
  - id: api-1
    url: https://example.com/a?x=1&y=2
    interval: 1m30s
    labels: {team: core, n: 7}
  - id: "010"
    url: http://example.com/b
    interval: 10ms
    paused: true
  - {id: c, url: "http://example.com/c", interval: 24h, paused: false, labels: {}}
`, want: []Entry{
			{Session: Session{ID: "api-1", URL: "https://example.com/a?x=1&y=2", Interval: Duration(90 * time.Second),
				Labels: map[string]string{"team": "core", "n": "7"}}, Line: 2},
			{Session: Session{ID: "010", URL: "http://example.com/b", Interval: Duration(10 * time.Millisecond), Paused: true}, Paused: &yes, Line: 6},
			{Session: Session{ID: "c", URL: "http://example.com/c", Interval: Duration(24 * time.Hour)}, Paused: &no, Line: 10},
		}},
		{name: "json with tabs", give: "{\n\t\"sessions\": [\n\t\t{\"id\": \"j\", \"url\": \"https://example.com/j\", \"interval\": \"5s\", \"paused\": true}\n\t]\n}\n",
			want: []Entry{{Session: Session{ID: "j", URL: "https://example.com/j", Interval: Duration(5 * time.Second), Paused: true}, Paused: &yes, Line: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFile([]byte(tt.give), HTTPURL)
			require.NoError(t, err)
			for i := range got {
				got[i].index = 0
			}
			require.Equal(t, tt.want, append([]Entry{}, got...))
		})
	}
}

// TestParseFileProblems: every problem of a file is found, one per line,
// naming the entry, and no URL is quoted.
func TestParseFileProblems(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{name: "not yaml", give: "sessions: [\n", want: []string{"not YAML or JSON: line 1: did not find expected node content"}},
		{name: "two documents", give: "sessions: []\n---\nsessions: []\n", want: []string{`line 2: a second document: the file must hold one (no "---" separators)`}},
		{name: "a list", give: "- id: a\n", want: []string{`line 1: want a mapping with one key, "sessions", holding a list of sessions`}},
		{name: "unknown top level", give: "session: []\n", want: []string{`line 1: unknown top-level field "session": want a mapping with one key, "sessions", holding a list of sessions`}},
		{name: "sessions not a list", give: "sessions: {a: 1}\n", want: []string{`line 1: "sessions" must be a list`}},
		{name: "entry not a mapping", give: "sessions: [a]\n", want: []string{"entry 1 (line 1): want a mapping with id, url and interval"}},
		{name: "every field", give: `sessions:
  - id: "a b"
    url: ftp://user:hunter2@example.com/
    interval: 30
    paused: yes
    labels: [x]
    URL: http://x/
`, want: []string{
			`entry 1 (line 2): id "a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)`,
			`entry 1 (line 2): url must be an absolute http or https URL with a host; its scheme is "ftp"`,
			`entry 1 (line 4): interval "30" is not a duration like "30s" or "1m30s"`,
			`entry 1 (line 5): paused must be true or false`,
			`entry 1 (line 6): labels must be a mapping of strings to strings`,
			`entry 1 (line 7): unknown field "URL" (fields: id, url, interval, paused, labels, selector, method, headers, body, expect, profile, timeout, schedule, tz, jitter, catchup, catchup_window)`,
		}},
		{name: "missing and repeated fields", give: "sessions:\n  - id: a\n    id: b\n", want: []string{
			`entry 1 (line 2, id a): missing field "url"`,
			`entry 1 (line 2, id a): missing field "interval" (or "schedule": a session has exactly one of interval and schedule)`,
			`entry 1 (line 3, id a): field "id" given twice`,
		}},
		{name: "ranges", give: "sessions:\n  - {id: a, url: 'http://x/', interval: 1ms}\n  - {id: b, url: 'http://x/', interval: 25h}\n  - {id: c, url: 'http:///', interval: 1s}\n", want: []string{
			"entry 1 (line 2, id a): interval 1ms is below the minimum 10ms",
			"entry 2 (line 3, id b): interval 25h0m0s is above the maximum 24h0m0s",
			"entry 3 (line 4, id c): url is an http URL without host",
		}},
		{name: "duplicate ids", give: "sessions:\n  - {id: a, url: 'http://x/', interval: 1s}\n  - {id: b, url: 'http://x/', interval: 1s}\n  - {id: a, url: 'http://y/', interval: 2s}\n", want: []string{
			"entry 3 (line 4, id a): id repeats entry 1 (line 2); each id may appear once",
		}},
		{name: "duplicate label", give: "sessions:\n  - {id: a, url: 'http://x/', interval: 1s, labels: {k: 1, k: 2}}\n", want: []string{
			`entry 1 (line 2, id a): labels: key "k" given twice`,
		}},
		{name: "null id", give: "sessions:\n  - {id: ~, url: 'http://x/', interval: 1s}\n", want: []string{
			"entry 1 (line 2): id must be a string",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFile([]byte(tt.give), HTTPURL)
			require.Nil(t, got)
			require.ErrorIs(t, err, ErrMalformed)
			require.Equal(t, strings.Join(tt.want, "\n"), err.Error())
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

func TestParseFileCapsProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("sessions:\n")
	for range MaxFileProblems + 5 {
		b.WriteString("  - {id: a, url: 'http://x/', interval: 1ms}\n")
	}
	_, err := ParseFile([]byte(b.String()), HTTPURL)
	var fe *FileError
	require.ErrorAs(t, err, &fe)
	require.Len(t, fe.Problems, MaxFileProblems)
	require.Equal(t, 2*(MaxFileProblems+5)-1, fe.Total) // each: interval; all but the first: repeated id
	require.True(t, strings.HasSuffix(err.Error(), "\nand 109 more problems"), err.Error()[len(err.Error())-60:])
}

// TestEncodeFileRoundTrip: what EncodeFile writes, ParseFile reads back
// the same, in both formats, whatever the ids, URLs and labels hold.
func TestEncodeFileRoundTrip(t *testing.T) {
	sessions := []Session{
		{ID: "010", URL: "https://example.com/p%40ss/a?x=1&y=<2>", Interval: Duration(90 * time.Second),
			Labels: map[string]string{"true": "null", "k: v": "- x", "#": "'\"", "n": "1e3"}},
		{ID: "true", URL: "http://example.com/", Interval: Duration(10 * time.Millisecond), Paused: true},
		{ID: "a/b:c@d", URL: "http://example.com/#frag", Interval: Duration(24 * time.Hour)},
	}
	for _, format := range []FileFormat{FormatYAML, FormatJSON} {
		t.Run(string(format), func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, EncodeFile(&buf, sessions, format))
			got, err := ParseFile(buf.Bytes(), HTTPURL)
			require.NoError(t, err, buf.String())
			require.Len(t, got, len(sessions))
			for i, e := range got {
				require.Equal(t, sessions[i], e.Session)
				if sessions[i].Paused {
					require.Equal(t, true, *e.Paused)
				} else {
					require.Nil(t, e.Paused, "paused is written only when true")
				}
			}

			buf.Reset()
			require.NoError(t, EncodeFile(&buf, nil, format))
			got, err = ParseFile(buf.Bytes(), HTTPURL)
			require.NoError(t, err, buf.String())
			require.Empty(t, got)
		})
	}
	require.ErrorContains(t, EncodeFile(&bytes.Buffer{}, sessions, "toml"), "unknown format")
}

// TestFieldReaders checks that every field a sessions file may hold has
// its reader, and nothing else has one.
func TestFieldReaders(t *testing.T) {
	require.ElementsMatch(t, fileFields, slices.Collect(maps.Keys(fieldReaders)))
}

// TestParseFileRefusesAnEntryTooBigToStore: an entry valid field by field
// whose encoding is larger than a value may be passed --dry-run, and a
// real apply wrote the entries before it, then failed on it ("run it
// again": it never could succeed).
func TestParseFileRefusesAnEntryTooBigToStore(t *testing.T) {
	body := strings.Repeat("x", MaxValueBytes)
	raw := "sessions:\n  - {id: ok, url: 'http://h/', interval: 1s}\n  - {id: big, url: 'http://h/', interval: 1s, method: POST, body: '" + body + "'}\n"
	_, err := ParseFile([]byte(raw), nil)
	require.ErrorContains(t, err, "entry 2 (line 3, id big): session: malformed: encoded session has 65608 bytes, more than 65536")
}
