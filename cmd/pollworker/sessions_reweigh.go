package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"
)

// sessionsReweighCommand counts the poll load of every session and
// rewrites the loads the workers balance by (session.Store.RebuildLoads).
func sessionsReweighCommand() *cli.Command {
	return &cli.Command{
		Name:  "reweigh",
		Usage: "count the poll loads and bucket sizes the workers balance by, from the session definitions and the index",
		Description: "The writers keep each index bucket's poll load (polls per day of its sessions) next to\n" +
			"its size. An index written before they did has no complete loads, and the workers then\n" +
			"balance by session counts; so does one written behind the store's back. reweigh reads\n" +
			"every session, counts the loads and writes them, with each bucket's size from its index set\n" +
			"(SCARD: the repair when check reports index-sizes, say after a Cluster master lost its data),\n" +
			"only if no write was recorded meanwhile; it retries, and fails if writes keep coming.\n" +
			"\"sessions apply\" does it too when the loads are incomplete.",
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				total, err := bounded(ctx, a, func(ctx context.Context) (int64, error) { return a.store.RebuildLoads(ctx) })
				if err != nil {
					return fmt.Errorf("sessions reweigh: %w", err)
				}
				fmt.Fprintf(cmd.Root().Writer, "poll loads counted: %d polls/day (%.1f polls/s)\n", total, float64(total)/86400)
				return nil
			})
		}),
	}
}
