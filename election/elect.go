package election

import (
	"context"
)

// Elect is the short form of New plus Run: it campaigns for role on client
// as a candidate with default settings and calls onElected for each term
// won (its ctx ends with the term). It blocks until ctx is done, then
// resigns. Use New for ids, priorities, health checks and callbacks.
func Elect(ctx context.Context, client Client, role string, onElected func(ctx context.Context, token int64)) error {
	e, err := New(Config{Client: client, Role: role, OnElected: onElected})
	if err != nil {
		return err
	}
	return e.Run(ctx)
}
