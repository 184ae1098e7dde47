package session_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// A writer stores sessions and pauses one; a worker learns what changed
// with one read (Changes) and rereads only those buckets.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	store, err := session.NewStore(client, keyspace.Space{})
	if err != nil {
		log.Fatal(err)
	}
	put := func(id string) {
		s := session.Session{ID: id, URL: "https://example.com/" + id, Interval: session.Duration(30 * time.Second)}
		if err := store.Put(ctx, s); err != nil {
			log.Fatal(err)
		}
	}
	put("api-1")
	seen, _ := store.Rev(ctx) // what a worker has applied so far

	put("api-2")
	if err := store.Pause(ctx, "api-2"); err != nil {
		log.Fatal(err)
	}
	bad := store.Put(ctx, session.Session{ID: "api 3", URL: "https://example.com", Interval: session.Duration(time.Second)})
	fmt.Println("malformed refused:", errors.Is(bad, session.ErrMalformed))

	all, problems, err := store.List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range all {
		fmt.Println(s.ID, s.Interval.D(), "paused:", s.Paused)
	}
	fmt.Println("problems:", len(problems))

	changed, rev, reset, err := store.Changes(ctx, seen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("buckets changed:", len(changed), "revisions:", rev-seen, "reset:", reset)
	// Output:
	// malformed refused: true
	// api-1 30s paused: false
	// api-2 30s paused: true
	// problems: 0
	// buckets changed: 1 revisions: 2 reset: false
}
