package state_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/state"
)

// A holder saves a session's state under its lease; after it released the
// lease and another holder took it, its late save is refused and the
// successor's state stays.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	if _, err := lease.MarkFresh(ctx, client, keyspace.Space{}); err != nil {
		log.Fatal(err)
	}
	store := state.NewStore(client, keyspace.Space{})
	w1, err := lease.New(lease.Config{Client: client, Holder: "w1"})
	if err != nil {
		log.Fatal(err)
	}
	w2, err := lease.New(lease.Config{Client: client, Holder: "w2"})
	if err != nil {
		log.Fatal(err)
	}

	old := w1.Acquire(ctx, []string{"feed-1"})[0].Lease
	if _, err := store.Save(ctx, old, time.Now(), []byte("cursor=10")); err != nil {
		log.Fatal(err)
	}
	if err := w1.Release(ctx, old); err != nil {
		log.Fatal(err)
	}

	cur := w2.Acquire(ctx, []string{"feed-1"})[0].Lease
	rec, err := store.Load(ctx, "feed-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("w2 reads %s, saved by token %v\n", rec.Data, rec.Token == old.Token())
	if _, err := store.Save(ctx, cur, time.Now(), []byte("cursor=12")); err != nil {
		log.Fatal(err)
	}

	_, err = store.Save(ctx, old, time.Now(), []byte("cursor=11"))
	fmt.Println("w1's late save is stale:", errors.Is(err, state.ErrStale))
	_, err = store.Save(ctx, cur, time.Now(), make([]byte, state.DefaultMaxSize+1))
	fmt.Println("oversize:", errors.Is(err, state.ErrTooLarge))
	rec, err = store.Load(ctx, "feed-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored: %s\n", rec.Data)
	// Output:
	// w2 reads cursor=10, saved by token true
	// w1's late save is stale: true
	// oversize: true
	// stored: cursor=12
}
