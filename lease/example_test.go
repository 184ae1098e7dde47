package lease_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// Two holders compete for one session's lease: the first takes it, the
// second is told who holds it, and takes it after a release with a greater
// fencing token.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	// From inside Redis a keyspace never used looks like one that lost its
	// data, and the loss quarantine would refuse free leases for one TTL.
	// This Redis is new: say so (never on a keyspace that may have lost
	// data while holders ran).
	if _, err := lease.MarkFresh(ctx, client, keyspace.Space{}); err != nil {
		log.Fatal(err)
	}

	w1, err := lease.New(lease.Config{Client: client, Holder: "w1"})
	if err != nil {
		log.Fatal(err)
	}
	w2, err := lease.New(lease.Config{Client: client, Holder: "w2"})
	if err != nil {
		log.Fatal(err)
	}

	first := w1.Acquire(ctx, []string{"api-1"})[0]
	fmt.Println("w1:", first.Lease.State(), "token > 0:", first.Lease.Token() > 0)

	busy := w2.Acquire(ctx, []string{"api-1"})[0]
	fmt.Println("w2 got it:", busy.Lease != nil, "held by:", busy.Holder)

	// Release deletes the key only if it still holds w1's owner value.
	if err := w1.Release(ctx, first.Lease); err != nil {
		log.Fatal(err)
	}
	fmt.Println("w1:", first.Lease.State())

	second := w2.Acquire(ctx, []string{"api-1"})[0]
	fmt.Println("w2:", second.Lease.State(), "token grew:", second.Lease.Token() > first.Lease.Token())
	if err := w2.ReleaseAll(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// w1: held token > 0: true
	// w2 got it: false held by: w1
	// w1: released
	// w2: held token grew: true
}
