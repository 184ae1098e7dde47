package poller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// news is what the heartbeat, subscription, renewal and lease goroutines
// (and the timers) tell the main loop: a round is wanted (trigger), a
// peer joined or left, a peer released. Its state is safe for concurrent
// use; its subscription loop (subscribe) is its writer of the peers'
// events.
type news struct {
	kick       chan struct{} // asks the main loop for a round; capacity 1
	peerNews   atomic.Bool   // a peer joined or left since membership was last read
	releasedMu sync.Mutex
	releasedBy map[string]struct{} // peers that announced a release or leave since the last round

	// What subscribe reads with: set by newNews, never changed.
	client redis.UniversalClient
	keys   keyspace.Space
	me     string // this worker's id: its own announcements are no news
	log    *zap.Logger
	retry  time.Duration // subscribeRetry; tests shorten it
}

// newNews returns the news of worker me, whose subscription reads the
// events of keys through client.
func newNews(client redis.UniversalClient, keys keyspace.Space, me string, log *zap.Logger) *news {
	return &news{kick: make(chan struct{}, 1), releasedBy: make(map[string]struct{}),
		client: client, keys: keys, me: me, log: log, retry: subscribeRetry}
}

// trigger asks for a round as soon as possible; many triggers coalesce.
func (n *news) trigger() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// takeReleased returns the peers that announced a release or a leave
// since the last call, and forgets them.
func (n *news) takeReleased() map[string]struct{} {
	n.releasedMu.Lock()
	defer n.releasedMu.Unlock()
	released := n.releasedBy
	n.releasedBy = make(map[string]struct{})
	return released
}

// subscribeRetry is how long subscribe waits before it tries again after
// Redis refused or failed the subscription.
const subscribeRetry = time.Second

// subscribe listens to the peers' events until ctx is done: a join, a
// leave or a cordon is peer news, a release or a leave names a peer that
// released; each asks for a round. A subscription Redis refuses (an ACL
// without the channel: NOPERM) or that fails is logged, at warn level
// once per run of failures, and tried again every subscribeRetry: without
// it session changes and releases are noticed only at the next full round.
func (n *news) subscribe(ctx context.Context) {
	failing := false
	for ctx.Err() == nil {
		sub := n.client.Subscribe(ctx, n.keys.Events())
		if _, err := sub.Receive(ctx); err != nil {
			_ = sub.Close()
			if ctx.Err() != nil {
				return
			}
			if !failing {
				n.log.Warn("subscription to the events channel failed: session changes and peers' releases are noticed only at the next full round (--discovery-interval) until it works; retrying every second",
					zap.String("channel", n.keys.Events()), zap.Error(err))
			} else {
				n.log.Debug("subscription to the events channel failed again", zap.Error(err))
			}
			failing = true
			t := time.NewTimer(n.retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if failing {
			n.log.Info("subscribed to the events channel again", zap.String("channel", n.keys.Events()))
			failing = false
			n.trigger() // what was announced meanwhile went unheard
		}
		ch := sub.Channel()
	recv:
		for {
			select {
			case <-ctx.Done():
				break recv
			case msg, ok := <-ch:
				if !ok {
					break recv
				}
				n.note(msg.Payload)
			}
		}
		_ = sub.Close()
	}
}

// note reads one event's payload (subscribe).
func (n *news) note(payload string) {
	ev, err := nodes.DecodeEvent(payload)
	if err != nil {
		n.log.Debug("ignoring event", zap.Error(err))
		return
	}
	if ev.Type == nodes.EventProbe {
		return // a writer checking that it may publish
	}
	if ev.Node == n.me && ev.Type != nodes.EventCordon {
		return // its own announcement (a cordon of this worker is news)
	}
	if ev.Type == nodes.EventJoin || ev.Type == nodes.EventLeave || ev.Type == nodes.EventCordon {
		n.peerNews.Store(true)
	}
	if ev.Type == nodes.EventRelease || ev.Type == nodes.EventLeave {
		n.releasedMu.Lock()
		n.releasedBy[ev.Node] = struct{}{}
		n.releasedMu.Unlock()
	}
	n.trigger()
}

// announcer tells the peers what this worker did (nodes.Publish on the
// events channel): its join, its releases, its leave.
type announcer struct {
	client  redis.UniversalClient
	keys    keyspace.Space
	me      string
	timeout time.Duration // Config.RequestTimeout
	obs     Observer
	log     *zap.Logger
}

// publish announces an event of type t (with sessions, for a release)
// within the request timeout; a failure is counted and logged, and
// otherwise ignored (the peers' periodic rounds catch up).
func (a *announcer) publish(ctx context.Context, t nodes.EventType, sessions []string) {
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ev := nodes.Event{Type: t, Node: a.me, Sessions: sessions}
	if err := nodes.Publish(rctx, a.client, a.keys, ev); err != nil {
		a.obs.RedisError("publish")
		a.log.Debug("publish failed", zap.String("type", string(ev.Type)), zap.Error(err))
	}
}

// leave announces this worker's leave, under ctx alone (the drain bounds
// it), and returns the error.
func (a *announcer) leave(ctx context.Context) error {
	return nodes.Publish(ctx, a.client, a.keys, nodes.Event{Type: nodes.EventLeave, Node: a.me})
}
