package httppoll

import (
	"bytes"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeStateFast decodes data as encoding/json would decode it into a
// State, for the JSON this package writes: one flat object of known keys
// with string and number values, no whitespace, no escapes in strings but
// \" and \\. It reports false for anything else (whitespace, another
// escape, an unknown or differently cased key, null, invalid UTF-8, a
// number json would refuse for its field, trailing bytes), and the caller
// decodes with encoding/json then. Every poll of the HTTP poller reads
// its session's state, and encoding/json's reflection took a tenth of a
// poll's CPU; this takes a fraction of that. FuzzDecodeStateFast checks
// that it never disagrees with encoding/json.
func decodeStateFast(data []byte) (State, bool) {
	var st State
	d := fastDecoder{data: data}
	if !d.byte('{') {
		return State{}, false
	}
	if d.peek('}') {
		d.pos++
		return st, d.pos == len(d.data)
	}
	for {
		key, escaped, ok := d.raw()
		if !ok || escaped || !d.byte(':') {
			return State{}, false
		}
		if !d.field(&st, key) {
			return State{}, false
		}
		if d.peek(',') {
			d.pos++
			continue
		}
		if !d.byte('}') {
			return State{}, false
		}
		return st, d.pos == len(d.data)
	}
}

// fastDecoder reads data from pos.
type fastDecoder struct {
	data []byte
	pos  int
}

func (d *fastDecoder) peek(c byte) bool { return d.pos < len(d.data) && d.data[d.pos] == c }

func (d *fastDecoder) byte(c byte) bool {
	if !d.peek(c) {
		return false
	}
	d.pos++
	return true
}

// field decodes the value of key into st.
func (d *fastDecoder) field(st *State, key []byte) bool {
	if f := stringField(st, key); f != nil {
		v, ok := d.string()
		*f = v
		return ok
	}
	if f := timeField(st, key); f != nil {
		v, ok := d.time()
		*f = v
		return ok
	}
	var ok bool
	switch string(key) { // no allocation: the compiler compares the bytes
	case "v":
		st.Version, ok = d.int()
	case "status":
		st.Status, ok = d.int()
	case "failures":
		st.Failures, ok = d.int()
	case "latency_ms":
		st.LatencyMS, ok = d.float()
	case "backoff_ms":
		st.BackoffMS, ok = d.int64(math.MaxInt64)
	}
	return ok
}

// stringField is the string field of st named key, nil for another key.
func stringField(st *State, key []byte) *string {
	switch string(key) {
	case "worker":
		return &st.Worker
	case "url_fnv":
		return &st.URLHash
	case "error":
		return &st.Error
	case "message":
		return &st.Message
	case "etag":
		return &st.ETag
	case "last_modified":
		return &st.LastModified
	case "body_sha256":
		return &st.BodySHA256
	}
	return nil
}

// timeField is the time field of st named key, nil for another key.
func timeField(st *State, key []byte) *time.Time {
	switch string(key) {
	case "polled":
		return &st.Polled
	case "last_success":
		return &st.LastSuccess
	case "failing_since":
		return &st.FailingSince
	case "changed":
		return &st.Changed
	}
	return nil
}

// string reads a JSON string whose only escapes are \" and \\, of valid
// UTF-8 without control characters.
func (d *fastDecoder) string() (string, bool) {
	raw, escaped, ok := d.raw()
	switch {
	case !ok:
		return "", false
	case escaped:
		return unescapeQuotes(raw), true
	}
	return string(raw), true
}

// raw reads a string as string does, and returns its bytes between the
// quotes, still escaped if escaped is set.
func (d *fastDecoder) raw() (raw []byte, escaped, ok bool) {
	if !d.byte('"') {
		return nil, false, false
	}
	start := d.pos
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			raw = d.data[start:d.pos]
			d.pos++
			// json replaces invalid bytes with U+FFFD.
			return raw, escaped, utf8.Valid(raw)
		case c == '\\':
			if d.pos+1 >= len(d.data) || (d.data[d.pos+1] != '"' && d.data[d.pos+1] != '\\') {
				return nil, false, false
			}
			escaped = true
			d.pos += 2
		case c < 0x20:
			return nil, false, false
		default:
			d.pos++
		}
	}
	return nil, false, false
}

// unescapeQuotes undoes \" and \\ in raw.
func unescapeQuotes(raw []byte) string {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' {
			i++
		}
		out = append(out, raw[i])
	}
	return string(out)
}

// number returns the JSON number at pos: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *fastDecoder) number() ([]byte, bool) {
	start := d.pos
	d.byte('-')
	switch {
	case d.peek('0'):
		d.pos++
	case d.digits() == 0:
		return nil, false
	}
	if d.byte('.') && d.digits() == 0 {
		return nil, false
	}
	if d.peek('e') || d.peek('E') {
		d.pos++
		if !d.byte('+') {
			d.byte('-')
		}
		if d.digits() == 0 {
			return nil, false
		}
	}
	return d.data[start:d.pos], true
}

func (d *fastDecoder) digits() int {
	n := 0
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
		n++
	}
	return n
}

// int64 reads a JSON number that is an integer within ±limit (json
// refuses a fraction or an exponent for an integer field, and an
// overflow; near the bound the fast path leaves it to json).
func (d *fastDecoder) int64(limit int64) (int64, bool) {
	num, ok := d.number()
	if !ok || bytes.ContainsAny(num, ".eE") {
		return 0, false
	}
	neg := num[0] == '-'
	if neg {
		num = num[1:]
	}
	var n int64
	for _, c := range num {
		if n > (limit-9)/10 {
			return 0, false // near the bound: encoding/json decides
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		return -n, true
	}
	return n, true
}

// int reads a JSON number that is an integer in an int (32 bits on some
// platforms).
func (d *fastDecoder) int() (int, bool) {
	n, ok := d.int64(math.MaxInt)
	return int(n), ok
}

func (d *fastDecoder) float() (float64, bool) {
	num, ok := d.number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(num), 64)
	return f, err == nil
}

// time reads a string as time.Time's UnmarshalJSON does (RFC 3339).
func (d *fastDecoder) time() (time.Time, bool) {
	raw, escaped, ok := d.raw()
	if !ok || escaped {
		return time.Time{}, false // no RFC 3339 time has a quote or a backslash
	}
	var t time.Time
	if err := t.UnmarshalText(raw); err != nil {
		return time.Time{}, false
	}
	return t, true
}
