package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/election"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// newRedis starts an in-memory Redis for the examples and declares its
// keyspace fresh: a keyspace never used looks, from inside Redis, like one
// that lost its data, and the loss quarantine would delay the first
// election by one TTL (see lease.MarkFresh).
func newRedis() (client *redis.Client, stop func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	if _, err := lease.MarkFresh(context.Background(), client, keyspace.Space{}); err != nil {
		log.Fatal(err)
	}
	return client, func() { _ = client.Close(); mr.Close() }
}

// A candidate campaigns for a role, leads, and resigns when its context
// ends. OnElected runs in its own goroutine; its ctx ends with the term.
func Example() {
	client, stop := newRedis()
	defer stop()

	elected := make(chan int64, 1)
	e, err := election.New(election.Config{
		Client: client,
		Role:   "billing-cron",
		ID:     "a",
		TTL:    time.Second,
		OnElected: func(ctx context.Context, token int64) {
			elected <- token // the fencing token to hand to downstream systems
			<-ctx.Done()     // work until the term ends
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	token := <-elected
	fmt.Println("token > 0:", token > 0, "is leader:", e.IsLeader())
	leader, err := e.Leader(context.Background())
	fmt.Println("leader:", leader, err)

	cancel() // resign: OnElected's ctx ends, then the lease is released
	fmt.Println("Run:", <-done)
	leader, err = e.Leader(context.Background())
	fmt.Printf("leader after Run: %q %v\n", leader, err)
	// Output:
	// token > 0: true is leader: true
	// leader: a <nil>
	// Run: <nil>
	// leader after Run: "" <nil>
}

// RunOnce suits cron-style jobs that every replica schedules: the job runs
// only where the role's lease is won, and the lease is released after it.
func ExampleRunOnce() {
	client, stop := newRedis()
	defer stop()

	cfg := election.Config{Client: client, Role: "nightly-report", ID: "a"}
	ran, err := election.RunOnce(context.Background(), cfg, func(ctx context.Context, token int64) error {
		fmt.Println("report runs under token > 0:", token > 0)
		return nil
	})
	fmt.Println("ran:", ran, err)
	// Output:
	// report runs under token > 0: true
	// ran: true <nil>
}
