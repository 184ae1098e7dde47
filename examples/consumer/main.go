// Command consumer acts once per change of a polled target: it reads the
// results streams of pollworker's workers with a Redis consumer group
// (XREADGROUP), so that several consumer processes share the work and a
// crashed one's entries are redelivered, and it acts on a result only when
//
//   - the result says the response changed ("changed" is "1": another
//     status, error class, ETag or body than the session's previous poll,
//     whichever worker made it);
//   - its fencing token is not lower than the last one acted on for the
//     session (a lower token is a late report of a worker that has since
//     lost the session: an older view of the target);
//   - the change was not acted on already (the same status and body hash
//     as the last action for the session: a change reported twice, by a
//     worker whose state save failed and then by its successor, or an
//     entry redelivered after a crash).
//
// What it acted on is kept in a Redis hash (<stream>:acted:<group>), written
// in one transaction with the XACK, so a restart remembers it. An action
// that fails is not acknowledged and stops the consumer: the entry stays
// pending and is retried, in order, at the next start (XREADGROUP from 0
// first). Each action is printed here;
// a real consumer calls its webhook or writes its database, keyed by
// session and body hash so that a retry is harmless.
//
//	pollworker run --redis-url redis://127.0.0.1:6379/0 &
//	go run ./examples/consumer --redis-url redis://127.0.0.1:6379/0 --group alerts --name c1
//
// With --redis-cluster the workers write 16 streams: run one consumer per
// stream (--stream 'poll:results:<i>:{<tag>}', as keyspace.Space.ResultStream
// names them), since one XREADGROUP may not span hash slots.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	url := flag.String("redis-url", "redis://127.0.0.1:6379/0", "the workers' Redis")
	stream := flag.String("stream", "poll:results", "the results stream (pollworker's <key-prefix>:results)")
	group := flag.String("group", "consumer", "the consumer group: one per application that acts on changes")
	name := flag.String("name", "c1", "this consumer's name in the group, stable across restarts")
	flag.Parse()
	opts, err := redis.ParseURL(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(2)
	}
	client := redis.NewClient(opts)
	defer func() { _ = client.Close() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := Consumer{Client: client, Stream: *stream, Group: *group, Name: *name,
		Act: func(_ context.Context, ch Change) error { return printChange(os.Stdout, ch) }}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

// Change is a result that says the response of a session changed.
type Change struct {
	// ID is the stream entry's id.
	ID string
	// Session, Worker and Token are who polled under which lease.
	Session, Worker string
	Token           int64
	// Status is the HTTP status (0 without a response), Error the poll's
	// error, BodySHA256 the content's hash, Body its first bytes (with
	// pollworker run --record-body).
	Status            int
	Error, BodySHA256 string
	Body              string
}

// Consumer reads Stream as Name in Group and calls Act once per change.
type Consumer struct {
	Client redis.Cmdable
	Stream string
	Group  string
	Name   string
	// Act is called for each change to act on; an error leaves the entry
	// pending, to be retried at the next Run.
	Act func(ctx context.Context, ch Change) error
	// Block is how long one XREADGROUP waits for new entries; default 1s.
	Block time.Duration
}

// Run creates the group if needed (reading from the stream's start),
// handles this consumer's pending entries, then new ones, until ctx ends
// (it then returns nil) or Redis or Act fails: the entry that failed and
// the ones delivered after it stay pending, for the next Run.
func (c Consumer) Run(ctx context.Context) error {
	err := c.Client.XGroupCreateMkStream(ctx, c.Stream, c.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create group: %w", err)
	}
	block := c.Block
	if block <= 0 {
		block = time.Second
	}
	from := "0" // first what was delivered to this consumer and not acknowledged
	for ctx.Err() == nil {
		res, err := c.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: c.Group, Consumer: c.Name,
			Streams: []string{c.Stream, from}, Count: 100, Block: block}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("read: %w", err)
		}
		var msgs []redis.XMessage
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		if from == "0" && len(msgs) == 0 {
			from = ">" // no pending entries left: new ones
			continue
		}
		for _, m := range msgs {
			if err := c.handle(ctx, m); err != nil {
				// Stop: the entry and those after it stay pending, and the
				// next start handles them in order.
				return fmt.Errorf("entry %s left pending: %w", m.ID, err)
			}
		}
	}
	return nil
}

// actedKey is the hash of what was acted on, per session: "token status hash".
func (c Consumer) actedKey() string { return c.Stream + ":acted:" + c.Group }

// handle acts on m if it is a change not acted on yet, then records it
// and acknowledges m in one transaction.
func (c Consumer) handle(ctx context.Context, m redis.XMessage) error {
	ch := parse(m)
	field := func(v map[string]any, k string) string { s, _ := v[k].(string); return s }
	ack := func(acted string) error {
		_, err := c.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if acted != "" {
				p.HSet(ctx, c.actedKey(), ch.Session, acted)
			}
			p.XAck(ctx, c.Stream, c.Group, m.ID)
			return nil
		})
		return err
	}
	if field(m.Values, "changed") != "1" || ch.Session == "" {
		return ack("")
	}
	last, err := c.Client.HGet(ctx, c.actedKey(), ch.Session).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	lastToken, lastSeen := splitActed(last)
	seen := strconv.Itoa(ch.Status) + " " + ch.BodySHA256
	switch {
	case ch.Token < lastToken:
		return ack("") // a late report of a holder that has lost the session since
	case seen == lastSeen:
		// Acted on already (reported again by the next holder, or
		// redelivered): only remember the newer token.
		return ack(strconv.FormatInt(ch.Token, 10) + " " + seen)
	}
	if err := c.Act(ctx, ch); err != nil {
		return err
	}
	return ack(strconv.FormatInt(ch.Token, 10) + " " + seen)
}

// splitActed reads a value of the acted hash: the token, then the status
// and body hash.
func splitActed(v string) (token int64, seen string) {
	t, seen, _ := strings.Cut(v, " ")
	token, _ = strconv.ParseInt(t, 10, 64)
	return token, seen
}

// parse reads the fields of a result entry (package results describes
// them); missing ones stay zero.
func parse(m redis.XMessage) Change {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	token, _ := strconv.ParseInt(s("token"), 10, 64)
	status, _ := strconv.Atoi(s("status"))
	return Change{ID: m.ID, Session: s("session"), Worker: s("worker"), Token: token, Status: status,
		Error: s("error"), BodySHA256: s("body_sha256"), Body: s("body")}
}

// printChange is the example's action.
func printChange(w io.Writer, ch Change) error {
	_, err := fmt.Fprintf(w, "session %s changed: status %d, body %.12s (token %d, worker %s)\n",
		ch.Session, ch.Status, ch.BodySHA256, ch.Token, ch.Worker)
	return err
}
