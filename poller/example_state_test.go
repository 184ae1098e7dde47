package poller_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// feed is an upstream that returns the events after a cursor: what a
// poller that keeps a last-seen id, a page token or an ETag talks to.
type feed struct {
	mu     sync.Mutex
	events []string
}

func (f *feed) after(cursor, limit int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cursor >= len(f.events) {
		return nil
	}
	return append([]string(nil), f.events[cursor:min(cursor+limit, len(f.events))]...)
}

func (f *feed) add(events ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, events...)
}

// cursorPoller reads the feed from the session's saved cursor, at most two
// events per poll, hands them on, and saves the cursor after them.
type cursorPoller struct {
	worker string
	feed   *feed
	out    chan<- string
}

// Poll reads the cursor from the turn's State (Config.Stateful), loaded
// before the first poll under the lease.
func (p *cursorPoller) Poll(ctx context.Context, t *poller.Turn) error {
	st := t.State()
	cursor := 0
	if data := st.Last().Data; data != nil { // nil: never saved
		n, err := strconv.Atoi(string(data))
		if err != nil {
			return err
		}
		cursor = n
	}
	batch := p.feed.after(cursor, 2)
	if len(batch) == 0 {
		return nil
	}
	// Hand the events on, then save the cursor: a crash in between hands
	// them on again (at least once). Save fails with state.ErrStale when
	// this worker's lease is no longer current: another worker has the
	// session, and this one's cursor must not overwrite the successor's.
	p.out <- fmt.Sprintf("%s (token > 0: %v): %v", p.worker, t.Token() > 0, batch)
	return st.Save(ctx, []byte(strconv.Itoa(cursor+len(batch))))
}

// A poller that keeps a cursor across polls and across a handoff: w1 reads
// the feed two events at a time and saves its cursor under its lease; when
// w1 stops, w2 takes the session over and goes on from w1's cursor.
func Example_stateful() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := session.NewStore(client, keyspace.Space{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Put(ctx, session.Session{ID: "feed-1", URL: "https://example.com/events",
		Interval: session.Duration(20 * time.Millisecond)}); err != nil {
		log.Fatal(err)
	}
	if _, err := lease.MarkFresh(ctx, client, keyspace.Space{}); err != nil {
		log.Fatal(err)
	}

	up := &feed{events: []string{"e1", "e2", "e3", "e4", "e5"}}
	out := make(chan string, 10)
	run := func(id string) (stop func()) {
		c, err := poller.New(poller.Config{
			Client: client, ID: id,
			Poller:   &cursorPoller{worker: id, feed: up, out: out},
			Stateful: true, // each Turn has the session's SessionState
			LeaseTTL: 3 * time.Second, RenewInterval: time.Second,
			HeartbeatInterval: time.Second, DiscoveryInterval: time.Second,
		})
		if err != nil {
			log.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				log.Fatal(err)
			}
		}
	}

	stop := run("w1")
	for range 3 {
		fmt.Println(<-out)
	}
	stop() // a graceful handoff: the poll returns, the lease is released
	up.add("e6", "e7")
	stop = run("w2")
	fmt.Println(<-out)
	stop()
	// Output:
	// w1 (token > 0: true): [e1 e2]
	// w1 (token > 0: true): [e3 e4]
	// w1 (token > 0: true): [e5]
	// w2 (token > 0: true): [e6 e7]
}
