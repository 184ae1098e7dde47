package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// TestSessionsGetOtherAndCorruptStates: sessions get prints another
// poller's state raw (not a JSON error of the HTTP poller's decoder), and a
// corrupt state as corrupt, in text and JSON.
func TestSessionsGetOtherAndCorruptStates(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	keys := keyspace.Space{}
	store, err := session.NewStore(client, keys)
	require.NoError(t, err)
	for _, id := range []string{"serial", "corrupt"} {
		require.NoError(t, store.Put(ctxT(t), session.Session{ID: id, URL: "http://127.0.0.1:1/" + id, Interval: session.Duration(time.Second)}))
	}
	m, err := lease.New(lease.Config{Client: client, Holder: "embedder", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	res := m.Acquire(ctxT(t), []string{"serial"})
	require.NotNil(t, res[0].Lease)
	_, err = state.NewStore(client, keys).Save(ctxT(t), res[0].Lease, time.Time{}, []byte("cursor=42\x00"))
	require.NoError(t, err)
	require.NoError(t, client.Set(ctxT(t), keys.State("corrupt"), "garbage", 0).Err())

	get := func(id string, args ...string) string {
		t.Helper()
		r := runApp(t, append([]string{"sessions", "get", "--redis-url", srv.URL(), id}, args...)...)
		require.Equal(t, exitOK, r.code, r.stderr)
		return r.stdout
	}
	out := get("serial")
	require.Contains(t, out, "(not the HTTP poller's)")
	require.Contains(t, out, `data:      "cursor=42\x00"`)
	require.NotContains(t, out, "json:")

	out = get("corrupt")
	require.Contains(t, out, "corrupt (the key is not a hash: wrong type string)")

	var v sessionView
	require.NoError(t, json.Unmarshal([]byte(get("serial", "--json")), &v))
	require.Equal(t, []byte("cursor=42\x00"), v.State.Raw)
	require.NoError(t, json.Unmarshal([]byte(get("corrupt", "--json")), &v))
	require.Equal(t, "the key is not a hash: wrong type string", v.State.Corrupt)
}
