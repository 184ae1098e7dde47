package nodes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEventRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		give Event
		want string
	}{
		{name: "join", give: Event{Type: EventJoin, Node: "a"}, want: `{"type":"join","node":"a"}`},
		{name: "leave", give: Event{Type: EventLeave, Node: "host-1-abc"}, want: `{"type":"leave","node":"host-1-abc"}`},
		{name: "release", give: Event{Type: EventRelease, Node: "a", Sessions: []string{"s1", "s2"}},
			want: `{"type":"release","node":"a","sessions":["s1","s2"]}`},
		{name: "sessions without node", give: Event{Type: EventSessions, Sessions: []string{"s/1"}},
			want: `{"type":"sessions","sessions":["s/1"]}`},
		{name: "sessions bare", give: Event{Type: EventSessions}, want: `{"type":"sessions"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.give.Encode()
			require.JSONEq(t, tt.want, msg)
			got, err := DecodeEvent(msg)
			require.NoError(t, err)
			require.Equal(t, tt.give, got)
		})
	}
}

func TestDecodeEventIgnoresUnknownFields(t *testing.T) {
	got, err := DecodeEvent(`{"type":"join","node":"a","extra":1}`)
	require.NoError(t, err)
	require.Equal(t, Event{Type: EventJoin, Node: "a"}, got)
}

func TestDecodeEventRejectsGarbage(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "empty", give: ""},
		{name: "not json", give: "hello"},
		{name: "truncated", give: `{"type":"join"`},
		{name: "null", give: "null"},
		{name: "array", give: `["join"]`},
		{name: "number", give: "42"},
		{name: "empty object", give: "{}"},
		{name: "unknown type", give: `{"type":"explode","node":"a"}`},
		{name: "type wrong kind", give: `{"type":1,"node":"a"}`},
		{name: "sessions wrong kind", give: `{"type":"sessions","sessions":"s1"}`},
		{name: "join without node", give: `{"type":"join"}`},
		{name: "release without node", give: `{"type":"release","sessions":["s"]}`},
		{name: "bad node id", give: `{"type":"join","node":"a b"}`},
		{name: "bad session id", give: `{"type":"sessions","sessions":["ok","x*"]}`},
		{name: "empty session id", give: `{"type":"sessions","sessions":[""]}`},
		{name: "binary", give: "\x00\xff\xfe{"},
		{name: "deep", give: strings.Repeat("[", 100000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeEvent(tt.give)
			require.ErrorIs(t, err, ErrMalformedEvent)
			require.Equal(t, Event{}, got)
		})
	}
}

func TestPublish(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	sub := c.Subscribe(ctx, testKeys.Events())
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx) // subscription confirmed
	require.NoError(t, err)

	want := Event{Type: EventRelease, Node: "a", Sessions: []string{"s1"}}
	require.NoError(t, Publish(ctx, c, testKeys, want))

	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, testKeys.Events(), msg.Channel)
	got, err := DecodeEvent(msg.Payload)
	require.NoError(t, err)
	require.Equal(t, want, got)

	require.ErrorIs(t, Publish(ctx, c, testKeys, Event{Type: "bogus"}), ErrMalformedEvent)
}
