package poller_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// One worker on an in-memory Redis with one session: it joins, takes the
// session's lease, polls it, and on cancellation drains (stops the poll,
// releases the lease, leaves) before Run returns.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	store, err := session.NewStore(client, keyspace.Space{})
	if err != nil {
		log.Fatal(err)
	}
	err = store.Put(ctx, session.Session{ID: "api-1", URL: "https://example.com/health", Interval: session.Duration(time.Minute)})
	if err != nil {
		log.Fatal(err)
	}
	// A keyspace never used looks, from inside Redis, like one that lost
	// its data: without this the loss quarantine would hold every lease
	// back for one LeaseTTL. It checks that the keyspace is new (or
	// initialised before), as pollworker init does.
	if _, err := lease.InitKeyspace(ctx, client, keyspace.Space{}, 0); err != nil {
		log.Fatal(err)
	}

	polled := make(chan string, 1)
	c, err := poller.New(poller.Config{
		Client: client,
		ID:     "w1",
		Poller: poller.PollFunc(func(ctx context.Context, t *poller.Turn) error {
			// Runs on a poll goroutine, only while the session's lease
			// is held; a real poller sends t.Token() downstream as its
			// fencing token.
			s := t.Session()
			select {
			case polled <- s.ID + " " + s.URL:
			default:
			}
			return nil
		}),
		// The first round does not wait for it: the worker joins, plans
		// and acquires at once. Shorter than the default all the same,
		// as a test would set it; the renew, heartbeat and discovery
		// intervals follow it (1s each), and a crashed worker's sessions
		// would wait for a peer at most FailoverBound, 4s.
		LeaseTTL: 3 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	fmt.Println("polled:", <-polled)
	fmt.Println("holds:", c.Status().Owned)
	cancel()
	fmt.Println("Run:", <-done)
	fmt.Println("lease left in Redis:", mr.Exists(keyspace.Space{}.Lease("api-1")))
	// Output:
	// polled: api-1 https://example.com/health
	// holds: [api-1]
	// Run: <nil>
	// lease left in Redis: false
}

// ExampleObservers: one Observer that feeds two, here a count of lease
// events and a log of failed Redis operations (metrics.New's Prometheus
// collectors would be another).
func ExampleObservers() {
	var events int
	count := poller.LeaseEvents(func(poller.Event) { events++ })
	logErrors := redisErrors{f: func(op string) { fmt.Println("redis error:", op) }}
	obs := poller.Observers(count, logErrors, nil)
	obs.LeaseEvent(poller.Event{Type: poller.EventAcquired, Session: "s1"})
	obs.RedisError("renew")
	fmt.Println("lease events:", events)
	// Output:
	// redis error: renew
	// lease events: 1
}

// redisErrors is an Observer of failed Redis operations only.
type redisErrors struct {
	poller.NopObserver
	f func(op string)
}

func (o redisErrors) RedisError(op string) { o.f(op) }
