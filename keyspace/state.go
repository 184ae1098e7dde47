package keyspace

// State is the saved state of a session (package state), <prefix>:state:{<session>}:
// a hash (data, token, saved, polled) without a TTL, written only under
// the session's current lease; it shares the lease's slot.
func (s Space) State(session string) string { return s.prefix() + ":state:{" + session + "}" }
