package poller

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// TestSubscriptionRefusedIsSaidAndRetried: a subscription Redis refuses
// (an ACL without the events channel) is a warning, not a silent 10 Hz
// retry inside go-redis; once the channel is granted the worker subscribes
// again, says so, asks for a round, and hears the next session change.
func TestSubscriptionRefusedIsSaidAndRetried(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "w", "on", ">pw", "resetchannels", "-@all", "+@connection", "+subscribe", "+unsubscribe").Err())
	user := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "w", Password: "pw"})
	t.Cleanup(func() { _ = user.Close() })
	core, logs := observer.New(zap.InfoLevel)
	n := newNews(user, keyspace.Space{}, "me", zap.New(core))
	n.retry = 10 * time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); n.subscribe(ctx) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("subscription to the events channel failed").Len() == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, zap.WarnLevel, logs.FilterMessageSnippet("subscription to the events channel failed").All()[0].Level)
	select {
	case <-n.kick:
	default:
	}

	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "w", "&poll:events").Err())
	require.Eventually(t, func() bool { return logs.FilterMessage("subscribed to the events channel again").Len() == 1 }, 20*time.Second, 10*time.Millisecond)
	<-n.kick // the round asked for on subscribing again
	require.Eventually(t, func() bool {
		_ = admin.Publish(ctx, "poll:events", nodes.Event{Type: nodes.EventSessions, Sessions: []string{"s1"}}.Encode()).Err()
		select {
		case <-n.kick:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, 20*time.Second, time.Millisecond)
	require.Equal(t, 1, logs.FilterMessageSnippet("subscription to the events channel failed").Len(), "the same failure warned once")
}

// TestProbeIsNoNews: the probe a writer publishes to check the channel
// (nodes.CheckChannel) asks for no round.
func TestProbeIsNoNews(t *testing.T) {
	n := newNews(nil, keyspace.Space{}, "me", zap.NewNop())
	n.note(nodes.Event{Type: nodes.EventProbe}.Encode())
	select {
	case <-n.kick:
		t.Fatal("a probe asked for a round")
	default:
	}
	n.note(nodes.Event{Type: nodes.EventSessions}.Encode())
	select {
	case <-n.kick:
	default:
		t.Fatal("a session change asked for no round")
	}
}
