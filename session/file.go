package session

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// A sessions file is the declarative form of a set of sessions, read by
// `pollworker sessions apply` and written by `pollworker sessions export`:
//
//	sessions:
//	  - id: api-1
//	    url: https://api.example.com/health
//	    interval: 30s
//	    labels: {team: core}
//	  - id: api-2
//	    url: https://api.example.com/ready
//	    interval: 1m
//	    paused: true
//	  - id: api-3
//	    url: https://api.example.com/v1/search
//	    interval: 30s
//	    method: POST
//	    headers: {Accept: application/json, Content-Type: application/json}
//	    body: '{"q": "status"}'
//	    expect: 200-299,304
//	    profile: github
//	  - id: report
//	    url: https://api.example.com/report
//	    schedule: "0 9 * * 1-5"
//	    tz: Europe/Berlin
//	    catchup: latest
//
// JSON of the same shape ({"sessions": [...]}) is read as well, since JSON
// is YAML. Field names are exact (no case folding, unlike the stored
// value), interval is a Go duration string (a bare number is refused: "30"
// would mean 30ms in the stored form), paused is true or false, and labels
// map strings to strings.

// FileFormat is the encoding of a sessions file written by EncodeFile.
type FileFormat string

// The formats of EncodeFile; ParseFile reads both.
const (
	FormatYAML FileFormat = "yaml"
	FormatJSON FileFormat = "json"
)

// MaxFileProblems is the number of problems a FileError lists; the others
// are counted.
const MaxFileProblems = 100

// Entry is one session of a sessions file.
type Entry struct {
	// Session is the definition; its Paused is *Paused, or false when the
	// entry does not say.
	Session Session
	// Paused is the paused state the entry asks for, nil when it has no
	// "paused" field (apply then keeps the current state).
	Paused *bool
	// Line is the entry's line in the file, from 1.
	Line int

	index int // position in the list, from 1
}

// FileProblem is one reason a sessions file is refused.
type FileProblem struct {
	// Entry is the position of the entry in the sessions list, from 1; 0
	// for a problem of the whole file.
	Entry int
	// Line is the line of the problem in the file, from 1; 0 if unknown.
	Line int
	// ID is the entry's id when it has a usable one, else "".
	ID string
	// Reason says which rule is broken. It never quotes a URL, which may
	// hold a password.
	Reason string
}

// String returns "entry 3 (line 12, id api-1): <reason>", or
// "line 1: <reason>" for the whole file.
func (p FileProblem) String() string {
	var where []string
	if p.Line > 0 {
		where = append(where, fmt.Sprintf("line %d", p.Line))
	}
	if p.ID != "" {
		where = append(where, "id "+p.ID)
	}
	switch {
	case p.Entry > 0 && len(where) > 0:
		return fmt.Sprintf("entry %d (%s): %s", p.Entry, strings.Join(where, ", "), p.Reason)
	case p.Entry > 0:
		return fmt.Sprintf("entry %d: %s", p.Entry, p.Reason)
	case len(where) > 0:
		return strings.Join(where, ", ") + ": " + p.Reason
	}
	return p.Reason
}

// FileError is the error of ParseFile: every problem found, up to
// MaxFileProblems, and how many there are. errors.Is(err, ErrMalformed)
// holds for it.
type FileError struct {
	Problems []FileProblem
	// Total counts every problem, listed or not.
	Total int
}

// Error returns the problems, one per line.
func (e *FileError) Error() string {
	lines := make([]string, 0, len(e.Problems)+1)
	for _, p := range e.Problems {
		lines = append(lines, p.String())
	}
	if more := e.Total - len(e.Problems); more > 0 {
		lines = append(lines, fmt.Sprintf("and %d more problems", more))
	}
	return strings.Join(lines, "\n")
}

// Is reports whether target is ErrMalformed.
func (e *FileError) Is(target error) bool { return target == ErrMalformed }

// fileFields are the fields of an entry, in the order they are written.
var fileFields = []string{"id", "url", "interval", "paused", "labels", "selector",
	"method", "headers", "body", "expect", "profile", "timeout",
	"schedule", "tz", "jitter", "catchup", "catchup_window"}

// ParseFile reads a sessions file (YAML or JSON) and checks it whole: the
// shape of the document, every field of every entry (unknown and repeated
// fields are refused), Session.Validate, checkURL (HTTPURL for what the
// built-in poller polls; nil for Validate's rule only) and ids repeated
// across entries. It returns the entries in file order, or a *FileError
// naming every problem. An empty document, or "sessions:" with no entries,
// is a file of no sessions.
func ParseFile(raw []byte, checkURL func(url string) error) ([]Entry, error) {
	fe := &FileError{}
	add := func(p FileProblem) {
		fe.Total++
		if len(fe.Problems) < MaxFileProblems {
			fe.Problems = append(fe.Problems, p)
		}
	}
	list, p := fileList(raw)
	if p != nil {
		add(*p)
		return nil, fe
	}
	entries := make([]Entry, 0, len(list))
	first := make(map[string]Entry, len(list)) // id -> its first entry
	for i, n := range list {
		e, problems := parseEntry(i+1, n, checkURL)
		for _, p := range problems {
			add(p)
		}
		id := e.Session.ID
		if prev, dup := first[id]; dup {
			add(FileProblem{Entry: i + 1, Line: e.Line, ID: id,
				Reason: fmt.Sprintf("id repeats entry %d (line %d); each id may appear once", prev.index, prev.Line)})
			continue
		}
		if keyspace.ValidateID(id) == nil {
			e.index = i + 1
			first[id] = e
		}
		if len(problems) == 0 {
			entries = append(entries, e)
		}
	}
	if fe.Total > 0 {
		return nil, fe
	}
	return entries, nil
}

// oneDocument decodes the single YAML (or JSON) document of raw: nil
// when there is none, a problem when it is not YAML or holds more than one.
func oneDocument(raw []byte) (*yaml.Node, *FileProblem) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil // no document at all
	} else if err != nil {
		return nil, &FileProblem{Reason: "not YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, &FileProblem{Reason: "not YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return nil, &FileProblem{Line: next.Line, Reason: "a second document: the file must hold one (no \"---\" separators)"}
	}
	return &doc, nil
}

// fileList returns the entries of the "sessions" list of raw, or the
// problem with the document.
func fileList(raw []byte) ([]*yaml.Node, *FileProblem) {
	doc, p := oneDocument(raw)
	if doc == nil || p != nil {
		return nil, p
	}
	root := resolve(doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	const shape = `want a mapping with one key, "sessions", holding a list of sessions`
	if isNull(root) {
		return nil, nil // comments only
	}
	if root.Kind != yaml.MappingNode {
		return nil, &FileProblem{Line: root.Line, Reason: shape}
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode || k.Value != "sessions":
			return nil, &FileProblem{Line: k.Line, Reason: fmt.Sprintf("unknown top-level field %.40q: %s", k.Value, shape)}
		case list != nil:
			return nil, &FileProblem{Line: k.Line, Reason: `field "sessions" given twice`}
		case isNull(v):
			list = &yaml.Node{Kind: yaml.SequenceNode}
		case v.Kind != yaml.SequenceNode:
			return nil, &FileProblem{Line: v.Line, Reason: `"sessions" must be a list`}
		default:
			list = v
		}
	}
	if list == nil {
		return nil, &FileProblem{Line: root.Line, Reason: shape}
	}
	return list.Content, nil
}

// parseEntry reads the entry at position i of the list; it returns every
// problem it finds with the fields, and otherwise the first rule the
// session breaks.
func parseEntry(i int, n *yaml.Node, checkURL func(string) error) (Entry, []FileProblem) {
	n = resolve(n)
	e := Entry{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return e, []FileProblem{{Entry: i, Line: n.Line, Reason: "want a mapping with id, url and interval"}}
	}
	var problems []FileProblem
	fail := func(line int, reason string) {
		problems = append(problems, FileProblem{Entry: i, Line: line, Reason: reason})
	}
	seen := map[string]bool{}   // fields present and read
	failed := map[string]bool{} // fields present but unreadable
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], resolve(n.Content[j+1])
		name := k.Value
		switch {
		case k.Kind != yaml.ScalarNode || !slices.Contains(fileFields, name):
			fail(k.Line, fmt.Sprintf("unknown field %.40q (fields: %s)", name, strings.Join(fileFields, ", ")))
			continue
		case seen[name] || failed[name]:
			fail(k.Line, fmt.Sprintf("field %q given twice", name))
			continue
		}
		if reason := readField(&e, name, v); reason != "" {
			fail(v.Line, reason)
			failed[name] = true
		} else {
			seen[name] = true
		}
	}
	for _, p := range checkRequired(e.Session, seen, failed, checkURL) {
		fail(n.Line, p)
	}
	if len(problems) == 0 {
		// Valid field by field: the whole must also fit in a value
		// (Encode), or the write fails after the entries before it.
		if _, err := Encode(e.Session); err != nil {
			fail(n.Line, fieldReason(err))
		}
	}
	return e, withID(problems, e.Session.ID)
}

// readField reads field name of an entry from v into e, or says why not.
func readField(e *Entry, name string, v *yaml.Node) string {
	if read, ok := fieldReaders[name]; ok {
		return read(e, name, v)
	}
	return ""
}

// fieldReader reads one field of an entry from v into e, or says why not.
type fieldReader func(e *Entry, name string, v *yaml.Node) string

// fieldReaders are the readers of the fields of an entry (fileFields).
var fieldReaders = map[string]fieldReader{
	"id":             readString(func(e *Entry, s string) { e.Session.ID = s }),
	"url":            readString(func(e *Entry, s string) { e.Session.URL = s }),
	"interval":       readInterval,
	"paused":         readPaused,
	"labels":         readStringMap(func(e *Entry, m map[string]string) { e.Session.Labels = m }),
	"method":         readRequestField,
	"body":           readRequestField,
	"expect":         readRequestField,
	"profile":        readRequestField,
	"timeout":        readTimeout,
	"headers":        readStringMap(func(e *Entry, m map[string]string) { e.Session.Headers = m }),
	"schedule":       readScheduleField,
	"tz":             readScheduleField,
	"jitter":         readScheduleField,
	"catchup":        readScheduleField,
	"catchup_window": readScheduleField,
	"selector":       readSelector,
}

// readString reads a string field with set.
func readString(set func(e *Entry, s string)) fieldReader {
	return func(e *Entry, name string, v *yaml.Node) string {
		s, ok := scalar(v)
		if !ok {
			return name + " must be a string"
		}
		set(e, s)
		return ""
	}
}

var (
	readInterval = readDuration("30s", func(e *Entry, d Duration) { e.Session.Interval = d })
	readTimeout  = readDuration("5s", func(e *Entry, d Duration) { e.Session.Timeout = d })
)

// readDuration reads a duration field with set; example is a value to
// show (a bare number is refused).
func readDuration(example string, set func(e *Entry, d Duration)) fieldReader {
	return func(e *Entry, name string, v *yaml.Node) string {
		s, ok := scalar(v)
		if !ok {
			return fmt.Sprintf("%s must be a duration like %q", name, example)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf(`%s %.40q is not a duration like %q or "1m30s"`, name, s, example)
		}
		set(e, Duration(d))
		return ""
	}
}

func readPaused(e *Entry, _ string, v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
		return "paused must be true or false"
	}
	b := v.Value == "true" || v.Value == "True" || v.Value == "TRUE"
	e.Paused = &b
	e.Session.Paused = b
	return ""
}

// readStringMap reads a mapping of strings to strings with set.
func readStringMap(set func(e *Entry, m map[string]string)) fieldReader {
	return func(e *Entry, name string, v *yaml.Node) string {
		m, p := parseStringMap(name, v)
		if p == "" {
			set(e, m)
		}
		return p
	}
}

func readSelector(e *Entry, _ string, v *yaml.Node) string {
	sel, ok := scalar(v)
	if !ok {
		return `selector must be a string like "zone=eu-1,egress=static"`
	}
	c, err := nodes.CanonicalSelector(sel)
	if err != nil {
		return fmt.Sprintf("selector: %v", err)
	}
	e.Session.Selector = c
	return ""
}

// readRequestField reads the string field name of the request (method,
// body, expect, profile) from v into e and checks it on its own, or says
// why not.
func readRequestField(e *Entry, name string, v *yaml.Node) string {
	s, ok := scalar(v)
	if !ok {
		return name + " must be a string"
	}
	probe := Session{}
	switch name {
	case "method":
		probe.Method = strings.ToUpper(s)
	case "body":
		e.Session.Body = s // checked against the method with the whole entry
		return ""
	case "expect":
		c, err := CanonicalExpect(s)
		if err != nil {
			return "expect " + err.Error()
		}
		e.Session.Expect = c
		return ""
	case "profile":
		probe.Profile = s
	}
	if err := probe.validateRequest(); err != nil {
		return fieldReason(err)
	}
	e.Session.Method, e.Session.Profile = cmp.Or(probe.Method, e.Session.Method), cmp.Or(probe.Profile, e.Session.Profile)
	return ""
}

// fieldReason is "<field> <rule>" for a *FieldError, else err's text.
func fieldReason(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field + " " + fe.Reason
	}
	return err.Error()
}

// checkRequired checks each required field of s on its own, so that all
// of an entry's problems are listed (a stand-in fills the other fields):
// missing, or breaking a rule of the session (and checkURL for the url).
func checkRequired(s Session, seen, failed map[string]bool, checkURL func(string) error) []string {
	const okURL, okInterval = "http://x/", Duration(time.Second)
	checks := []struct {
		field string
		s     Session
	}{
		{"id", Session{ID: s.ID, URL: okURL, Interval: okInterval}},
		{"url", Session{ID: "x", URL: s.URL, Interval: okInterval}},
	}
	out := checkTiming(s, seen, failed)
	if !seen["schedule"] && !failed["schedule"] {
		checks = append(checks, struct {
			field string
			s     Session
		}{"interval", Session{ID: "x", URL: okURL, Interval: s.Interval}})
	}
	for _, c := range checks {
		if !seen[c.field] {
			if !failed[c.field] {
				out = append(out, missingField(c.field))
			}
			continue
		}
		err := c.s.Validate()
		if err == nil && c.field == "url" && checkURL != nil {
			err = checkURL(c.s.URL)
		}
		if err != nil {
			var fe *FieldError
			reason := err.Error()
			if errors.As(err, &fe) {
				reason = fe.Field + " " + fe.Reason
			}
			out = append(out, reason)
		}
	}
	// The request fields read; each alone was checked as it was read.
	req := Session{Method: s.Method, Headers: s.Headers, Body: s.Body, Expect: s.Expect, Profile: s.Profile, Timeout: s.Timeout, Interval: s.Interval}
	if err := req.validateRequest(); err != nil {
		out = append(out, fieldReason(err))
	}
	return out
}

// withID sorts problems by line and names id in them when it is a valid
// id.
func withID(problems []FileProblem, id string) []FileProblem {
	slices.SortStableFunc(problems, func(a, b FileProblem) int { return a.Line - b.Line })
	if keyspace.ValidateID(id) == nil {
		for k := range problems {
			problems[k].ID = id
		}
	}
	return problems
}

// parseStringMap reads field, a mapping of strings to strings, or says why
// not.
func parseStringMap(field string, v *yaml.Node) (map[string]string, string) {
	if isNull(v) {
		return nil, ""
	}
	if v.Kind != yaml.MappingNode {
		return nil, field + " must be a mapping of strings to strings"
	}
	labels := make(map[string]string, len(v.Content)/2)
	for j := 0; j+1 < len(v.Content); j += 2 {
		k, ok := scalar(resolve(v.Content[j]))
		if !ok || k == "" {
			return nil, field + ": a key is empty or not a string"
		}
		val, ok := scalar(resolve(v.Content[j+1]))
		if !ok {
			return nil, fmt.Sprintf("%s: %.40q must be a string", field, k)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Sprintf("%s: key %.40q given twice", field, k)
		}
		labels[k] = val
	}
	if len(labels) == 0 {
		return nil, ""
	}
	return labels, ""
}

// scalar returns the text of a non-null scalar, as written: "010" stays
// "010", 1e3 stays "1e3".
func scalar(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", false
	}
	return n.Value, true
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// resolve follows aliases (*name) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// fileEntry is an entry as EncodeFile writes it.
type fileEntry struct {
	ID           string            `json:"id" yaml:"id"`
	URL          string            `json:"url" yaml:"url"`
	Interval     string            `json:"interval,omitempty" yaml:"interval,omitempty"`
	Paused       bool              `json:"paused,omitempty" yaml:"paused,omitempty"`
	Labels       map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Selector     string            `json:"selector,omitempty" yaml:"selector,omitempty"`
	Method       string            `json:"method,omitempty" yaml:"method,omitempty"`
	Headers      map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	Body         string            `json:"body,omitempty" yaml:"body,omitempty"`
	Expect       string            `json:"expect,omitempty" yaml:"expect,omitempty"`
	Profile      string            `json:"profile,omitempty" yaml:"profile,omitempty"`
	Timeout      string            `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	fileSchedule `yaml:",inline"`
}

// fileHeader opens a YAML file written by EncodeFile.
const fileHeader = `# Sessions of pollworker, as written by "pollworker sessions export".
# Apply with "pollworker sessions apply -f FILE". An entry without "paused"
# keeps the paused state it has in Redis (new sessions start unpaused).
`

// EncodeFile writes sessions to w as a sessions file in format, in the
// order given, so that ParseFile reads them back. URLs are written whole,
// passwords included. "paused" is written only when true: applied, such a
// file keeps the paused state of the sessions it does not mark. Entries are
// encoded one at a time, so memory does not grow with the number of
// sessions beyond the slice itself.
func EncodeFile(w io.Writer, sessions []Session, format FileFormat) error {
	if format != FormatYAML && format != FormatJSON {
		return fmt.Errorf("session: encode file: unknown format %q (want %s or %s)", format, FormatYAML, FormatJSON)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	open, sep, end := fileHeader+"sessions:\n", "", ""
	switch {
	case format == FormatJSON && len(sessions) == 0:
		open, end = "{\n  \"sessions\": []\n}\n", ""
	case format == FormatJSON:
		open, sep, end = "{\n  \"sessions\": [\n", ",\n", "\n  ]\n}\n"
	case len(sessions) == 0:
		open = fileHeader + "sessions: []\n"
	}
	_, _ = bw.WriteString(open)
	for i, s := range sessions {
		e := fileEntry{ID: s.ID, URL: s.URL, Paused: s.Paused, Labels: s.Labels, Selector: s.Selector,
			Method: s.Method, Headers: s.Headers, Body: s.Body, Expect: s.Expect, Profile: s.Profile, fileSchedule: fileScheduleOf(s)}
		if !s.Scheduled() {
			e.Interval = s.Interval.D().String()
		}
		if s.Timeout != 0 {
			e.Timeout = s.Timeout.D().String()
		}
		if i > 0 {
			_, _ = bw.WriteString(sep)
		}
		var err error
		if format == FormatJSON {
			err = writeJSONEntry(bw, e)
		} else {
			err = writeYAMLEntry(bw, e)
		}
		if err != nil {
			return fmt.Errorf("session: encode file: %s: %w", s.ID, err)
		}
	}
	_, _ = bw.WriteString(end)
	return bw.Flush()
}

// writeJSONEntry writes e as an element of the "sessions" array, indented
// by four spaces, without a trailing newline.
func writeJSONEntry(w *bufio.Writer, e fileEntry) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // URLs read better with their & kept
	enc.SetIndent("    ", "  ")
	if err := enc.Encode(e); err != nil {
		return err
	}
	_, _ = w.WriteString("    ")
	_, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return err
}

// writeYAMLEntry writes e as an item of the "sessions" list, yaml.v3
// choosing the quoting of each value.
func writeYAMLEntry(w *bufio.Writer, e fileEntry) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode([]fileEntry{e}); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	for line := range strings.Lines(buf.String()) {
		_, _ = w.WriteString("  ")
		_, _ = w.WriteString(line)
	}
	return nil
}
