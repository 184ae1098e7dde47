package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/results"
)

// TestConsumerActsOncePerChange: against results written as the workers
// write them, the consumer acts on each change once: not on unchanged
// results, not on a change reported again by the next holder, not on a
// stale holder's late report; a failed action stays pending and is done
// at the next start.
func TestConsumerActsOncePerChange(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := time.UnixMilli(1_800_000_000_000)
	_, err := results.Write(ctx, c, keyspace.Space{}, false, 1000, []results.Result{
		{Session: "s1", Worker: "w1", Token: 5, Status: 200, At: at, Changed: true, BodySHA256: "v1"},      // act
		{Session: "s1", Worker: "w1", Token: 5, Status: 200, At: at, BodySHA256: "v1"},                     // unchanged
		{Session: "s1", Worker: "w1", Token: 5, Status: 200, At: at, Changed: true, BodySHA256: "v2"},      // act
		{Session: "s1", Worker: "w2", Token: 6, Status: 200, At: at, Changed: true, BodySHA256: "v2"},      // reported again
		{Session: "s1", Worker: "w1", Token: 5, Status: 200, At: at, Changed: true, BodySHA256: "v1"},      // w1's late report
		{Session: "s2", Worker: "w2", Token: 7, Status: 503, At: at, Changed: true, Error: "server error"}, // act: fails once
		{Session: "s1", Worker: "w2", Token: 6, Status: 200, At: at, Changed: true, BodySHA256: "v3"},      // act
	})
	require.NoError(t, err)

	var mu sync.Mutex
	var acted []string
	failS2 := true
	consumer := Consumer{Client: c, Stream: keyspace.Space{}.Results(), Group: "g", Name: "c1", Block: 50 * time.Millisecond,
		Act: func(_ context.Context, ch Change) error {
			mu.Lock()
			defer mu.Unlock()
			if ch.Session == "s2" && failS2 {
				failS2 = false
				return errors.New("webhook down")
			}
			acted = append(acted, ch.Session+" "+ch.BodySHA256)
			return nil
		}}
	run := func(ctx context.Context) error {
		done := make(chan error, 1)
		go func() { done <- consumer.Run(ctx) }()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("the consumer did not stop")
			return nil
		}
	}
	require.ErrorContains(t, run(ctx), "webhook down", "an action that fails stops it")
	require.Equal(t, []string{"s1 v1", "s1 v2"}, acted)
	pending, err := c.XPending(ctx, keyspace.Space{}.Results(), "g").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, pending.Count, "the failed entry and the one after it")

	// The next start handles them, in order; then it waits for new ones
	// until stopped.
	rctx, stop := context.WithCancel(ctx)
	go func() {
		defer stop()
		assert.Eventually(t, func() bool {
			p, err := c.XPending(ctx, keyspace.Space{}.Results(), "g").Result()
			return err == nil && p.Count == 0
		}, 10*time.Second, 5*time.Millisecond)
	}()
	require.NoError(t, run(rctx))
	require.Equal(t, []string{"s1 v1", "s1 v2", "s2 ", "s1 v3"}, acted)
}
