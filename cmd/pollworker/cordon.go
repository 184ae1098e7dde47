package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// oneID returns the single worker id argument of cmd, or a usage error.
func oneID(cmd *cli.Command) (string, error) {
	if cmd.Args().Len() != 1 {
		return "", usageError(fmt.Errorf("%s takes one worker id, got %d arguments", cmd.Name, cmd.Args().Len()))
	}
	id := cmd.Args().First()
	if err := keyspace.ValidateID(id); err != nil {
		return "", usageError(fmt.Errorf("invalid worker id %q: %s", id, idProblem(err)))
	}
	return id, nil
}

// withWorkerID runs fn, connected as withAdmin does, with the single worker
// id argument of cmd. An error of fn that is one of refusals is a usage
// error (exit 2).
func withWorkerID(ctx context.Context, cmd *cli.Command, fn func(ctx context.Context, a admin, id string) error, refusals ...error) error {
	id, err := oneID(cmd)
	if err != nil {
		return err
	}
	return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
		err := fn(ctx, a, id)
		for _, r := range refusals {
			if errors.Is(err, r) {
				return usageError(err)
			}
		}
		return err
	})
}

func drainCommand() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Aliases:   []string{"cordon"},
		Usage:     "hand off every session of a live worker and let it take nothing new, without stopping it",
		ArgsUsage: "ID",
		Description: "Cordons the live worker ID: the workers plan without it, so it hands off what it holds\n" +
			"as on SIGTERM (each poll in flight finishes first, then the lease is released with its\n" +
			"schedule and the successor polls when the session is due) and takes nothing new. It stays a\n" +
			"member, heartbeats, stays ready and serves its HTTP endpoints. The cordon lasts, across\n" +
			"restarts of that worker, until \"pollworker uncordon ID\" (or \"forget ID\"). With --wait, waits\n" +
			"until it holds no lease (at most --timeout) and says how long that took.",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "wait", Usage: "wait until the worker holds no lease"}),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withWorkerID(ctx, cmd, func(ctx context.Context, a admin, id string) error {
				if err := nodes.Cordon(ctx, a.client, a.keys, id); err != nil {
					return err
				}
				w := cmd.Root().Writer
				var m nodes.Membership
				r, err := nodes.NewReader(a.client, a.keys, zap.NewNop())
				if err == nil {
					m, err = r.Members(ctx)
				}
				if err == nil && m.CordonsSuspended() {
					// Nobody left to hand off to: the sessions stay where they are.
					fmt.Fprintf(w, "cordoned %s: every live worker is cordoned now, so the cordons count for nothing and the workers keep polling every session until one is uncordoned (pollworker uncordon ID)\n", id)
					if cmd.Bool("wait") {
						return fmt.Errorf("drain --wait %s: every live worker is cordoned: %s keeps its sessions", id, id)
					}
					return nil
				}
				fmt.Fprintf(w, "cordoned %s: it hands off its sessions and takes none (pollworker uncordon %s to undo)\n", id, id)
				if !cmd.Bool("wait") {
					return nil
				}
				start := time.Now()
				for {
					st, err := computeStatus(ctx, a.client, a.keys, false)
					if err != nil {
						return err
					}
					held := -1
					for _, n := range st.Nodes {
						if n.ID == id {
							held = n.Leases
						}
					}
					if held <= 0 {
						fmt.Fprintf(w, "%s holds no lease, %v after the cordon\n", id, time.Since(start).Round(time.Millisecond))
						return nil
					}
					select {
					case <-ctx.Done():
						return fmt.Errorf("%s still holds %d leases after %v: %w", id, held, time.Since(start).Round(time.Millisecond), ctx.Err())
					case <-time.After(100 * time.Millisecond):
					}
				}
			}, nodes.ErrNotLive)
		}),
	}
}

func uncordonCommand() *cli.Command {
	return &cli.Command{
		Name:      "uncordon",
		Usage:     "let a cordoned worker take its share again",
		ArgsUsage: "ID",
		Flags:     adminFlags(),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withWorkerID(ctx, cmd, func(ctx context.Context, a admin, id string) error {
				was, err := nodes.Uncordon(ctx, a.client, a.keys, id)
				if err != nil {
					return err
				}
				if !was {
					fmt.Fprintf(cmd.Root().Writer, "%s was not cordoned\n", id)
					return nil
				}
				fmt.Fprintf(cmd.Root().Writer, "uncordoned %s: it takes its share again\n", id)
				return nil
			})
		}),
	}
}

func forgetCommand() *cli.Command {
	return &cli.Command{
		Name:      "forget",
		Usage:     "remove the membership entry of a worker that crashed, before it expires",
		ArgsUsage: "ID",
		Description: "Removes ID from the membership (and its cordon) so that the others plan without it at\n" +
			"once, instead of when its heartbeat entry expires (3 heartbeat intervals). Refused (exit 2)\n" +
			"while ID heartbeats: its last heartbeat must be older than two heartbeat intervals. Its\n" +
			"leases are not touched: they expire by their TTL.\n\n" +
			"An entry of the node index that is not a valid worker id (written by hand or by another\n" +
			"program; status and check list them, the workers ignore them) is removed from the index\n" +
			"and nothing else is touched; quote it for the shell: pollworker forget 'bad id'.",
		Flags: adminFlags(),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() == 1 && keyspace.ValidateID(cmd.Args().First()) != nil {
				member := cmd.Args().First()
				return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
					if err := nodes.ForgetJunk(ctx, a.client, a.keys, member); err != nil {
						if errors.Is(err, nodes.ErrNotJunk) {
							return usageError(fmt.Errorf("invalid worker id %s, and no such entry in the node index", idProblemOf(member)))
						}
						return err
					}
					fmt.Fprintf(cmd.Root().Writer, "removed the invalid entry %s from the node index (nothing else touched)\n", printableID(member))
					return nil
				})
			}
			return withWorkerID(ctx, cmd, func(ctx context.Context, a admin, id string) error {
				if err := nodes.Forget(ctx, a.client, a.keys, id); err != nil {
					return err
				}
				fmt.Fprintf(cmd.Root().Writer, "forgot %s\n", id)
				return nil
			}, nodes.ErrLive, nodes.ErrUnknown)
		}),
	}
}
