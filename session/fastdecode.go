package session

// A fast path for Decode: the definitions that Store writes (json.Marshal
// of a Session: lower-case field names, no duplicates, ASCII strings
// without escapes in the common case) are parsed by hand, and anything
// else goes to encoding/json, so that the result of Decode is the same
// either way (FuzzDecodeFastPath). A worker reads one definition per
// session it takes: in a cold start of 1M sessions encoding/json's
// reflection was a quarter of the workers' CPU.

// fastDecoder parses one document of the plain subset of JSON below; any
// byte outside it makes decode report false (nothing is wrong: the caller
// decodes with encoding/json then).
//
//	document = ws '{' ws [ member { ws ',' ws member } ] ws '}' ws
//	member   = known-name ws ':' ws value (each name at most once)
//	value    = plain-string | true | false (paused) | '{' plain-string ':' plain-string, ... '}' (labels, headers)
//	plain-string = '"' { byte in 0x20..0x7e but '"' and '\' } '"'
//
// Duration fields take a plain string through Duration.UnmarshalJSON, as
// encoding/json would call it.
type fastDecoder struct {
	b []byte
	i int
}

// decodeFast fills doc from raw and reports true when raw is in the plain
// subset; false leaves doc in an unspecified state.
func decodeFast(raw []byte, doc *document) bool {
	d := fastDecoder{b: raw}
	var seen uint32
	d.ws()
	ok := d.object(func(name []byte) bool {
		f := fieldIndex(name)
		if f < 0 || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
		return d.field(f, doc)
	})
	d.ws()
	return ok && d.i == len(d.b)
}

// object consumes an object whose keys are plain strings, calling member
// with each key once its ':' is consumed, to consume the value.
func (d *fastDecoder) object(member func(key []byte) bool) bool {
	if !d.byte('{') {
		return false
	}
	d.ws()
	if d.byte('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok {
			return false
		}
		d.ws()
		if !d.byte(':') {
			return false
		}
		d.ws()
		if !member(k) {
			return false
		}
		d.ws()
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
		d.ws()
	}
}

// The fields of the fast path, in the order of fastFields.
const (
	fID = iota
	fURL
	fInterval
	fPaused
	fLabels
	fSelector
	fMethod
	fHeaders
	fBody
	fExpect
	fProfile
	fSchedule
	fTZ
	fJitter
	fCatchUp
	fCatchUpWindow
	fTimeout
)

// fastFields are the JSON names of the document's fields (Session's tags,
// and the document's id).
var fastFields = [...]string{
	fID: "id", fURL: "url", fInterval: "interval", fPaused: "paused", fLabels: "labels",
	fSelector: "selector", fMethod: "method", fHeaders: "headers", fBody: "body",
	fExpect: "expect", fProfile: "profile", fSchedule: "schedule", fTZ: "tz",
	fJitter: "jitter", fCatchUp: "catchup", fCatchUpWindow: "catchup_window", fTimeout: "timeout",
}

// fieldIndex is the index of name in fastFields, -1 if none (a name of
// another case, or unknown: encoding/json decides).
func fieldIndex(name []byte) int {
	for i, f := range fastFields {
		if string(name) == f {
			return i
		}
	}
	return -1
}

// field decodes the value of field f into doc.
func (d *fastDecoder) field(f int, doc *document) bool {
	s := &doc.Session
	switch f {
	case fPaused:
		return d.boolean(&s.Paused)
	case fLabels:
		return d.strMap(&s.Labels)
	case fHeaders:
		return d.strMap(&s.Headers)
	case fInterval, fJitter, fCatchUpWindow, fTimeout:
		start := d.i
		if _, ok := d.str(); !ok {
			return false
		}
		dst := &s.Interval
		switch f {
		case fJitter:
			dst = &s.Jitter
		case fCatchUpWindow:
			dst = &s.CatchUpWindow
		case fTimeout:
			dst = &s.Timeout
		}
		return dst.UnmarshalJSON(d.b[start:d.i]) == nil
	}
	v, ok := d.str()
	if !ok {
		return false
	}
	str := string(v)
	if f == fID {
		doc.ID = &str
		return true
	}
	dst := [...]*string{fURL: &s.URL, fSelector: &s.Selector, fMethod: &s.Method, fBody: &s.Body,
		fExpect: &s.Expect, fProfile: &s.Profile, fSchedule: &s.Schedule, fTZ: &s.TZ, fCatchUp: &s.CatchUp}
	if f >= len(dst) || dst[f] == nil {
		return false
	}
	*dst[f] = str
	return true
}

// ws skips JSON whitespace.
func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c if it is next.
func (d *fastDecoder) byte(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str consumes a plain string and returns its text (without the quotes).
func (d *fastDecoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// boolean consumes true or false.
func (d *fastDecoder) boolean(dst *bool) bool {
	rest := d.b[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*dst, d.i = true, d.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*dst, d.i = false, d.i+5
	default:
		return false
	}
	return true
}

// strMap consumes an object of plain strings into a new map (a key given
// twice keeps its last value, as encoding/json does).
func (d *fastDecoder) strMap(dst *map[string]string) bool {
	m := make(map[string]string)
	ok := d.object(func(k []byte) bool {
		v, ok := d.str()
		m[string(k)] = string(v)
		return ok
	})
	*dst = m
	return ok
}
