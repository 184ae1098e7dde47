package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pollworker/pollworker/keyspace"
)

// document is the stored form of a Session. Its ID, at a shallower depth
// than Session.ID, takes the "id" field, so Decode can tell an absent id
// from an empty one.
type document struct {
	ID *string `json:"id"`
	Session
}

// Decode parses the value stored at the key of session id and validates it.
//
// The value must be a JSON object of at most MaxValueBytes bytes (checked
// before parsing). Its "id" field is optional; if present it must equal id.
// "url" and "interval" are required, see Session.Validate; "interval" is a
// Go duration string ("1.5s") or a number of milliseconds. Unknown fields
// are ignored, so that older workers read sessions written by newer tools;
// field names match case-insensitively, as encoding/json does. Empty labels
// decode as nil. Errors wrap ErrMalformed and say what is wrong.
func Decode(id string, raw []byte) (Session, error) {
	if err := keyspace.ValidateID(id); err != nil {
		return Session{}, fmt.Errorf("%w: key id: %w", ErrMalformed, err)
	}
	if len(raw) > MaxValueBytes {
		return Session{}, fmt.Errorf("%w: value has %d bytes, more than %d", ErrMalformed, len(raw), MaxValueBytes)
	}
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		if len(t) == 0 {
			return Session{}, fmt.Errorf("%w: empty value", ErrMalformed)
		}
		return Session{}, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var doc document
	if !decodeFast(raw, &doc) {
		doc = document{}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return Session{}, fmt.Errorf("%w: %s", ErrMalformed, jsonReason(err))
		}
	}
	if doc.ID != nil && *doc.ID != id {
		return Session{}, fmt.Errorf("%w: id %.64q in the value differs from the key's id %q", ErrMalformed, *doc.ID, id)
	}
	s := doc.Session
	s.ID = id
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Headers) == 0 {
		s.Headers = nil
	}
	if err := s.Validate(); err != nil {
		return Session{}, err
	}
	return s, nil
}

// jsonReason rewrites encoding/json's errors in the document's terms.
func jsonReason(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ) && typ.Field != "":
		field := strings.TrimPrefix(typ.Field, "Session.") // the embedded struct
		return fmt.Sprintf("field %q: JSON %s where %s was expected", field, typ.Value, typ.Type)
	}
	return err.Error()
}
