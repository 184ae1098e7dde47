package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/lease"
)

// flagScanLimit is init's bound on the keys it scans per Redis server.
const flagScanLimit = "scan-limit"

// initCommand is `pollworker init`: declare a new keyspace fresh, so that
// the first workers need not wait out the loss quarantine.
func initCommand() *cli.Command {
	return &cli.Command{
		Name:  "init",
		Usage: "declare a new keyspace fresh, before its first worker starts, so that the first polls come at once",
		Description: "From inside Redis a keyspace never used and one that lost its data look the same: both\n" +
			"lack the loss marker, and the workers then take no free lease for one loss quarantine\n" +
			"(--loss-quarantine, the lease TTL: 30s by default), so that every lease granted before a\n" +
			"loss has ended first. init writes the marker of a new keyspace, after checking that it is\n" +
			"new: it refuses (exit 2) a keyspace with a worker in its node index, or any lease, fencing\n" +
			"record or counter, handoff mark, token high-water mark, session state or heartbeat key\n" +
			"under --key-prefix. Fencing records and high-water marks never expire but nothing counts\n" +
			"them, so only a scan can tell that none exists: init reads\n" +
			"the node index (one read), then every key of each Redis server with SCAN MATCH\n" +
			"'<key-prefix>:*' (non-blocking, about a thousand keys per round trip), if the server holds\n" +
			"at most --scan-limit keys. Sessions may be added before or after it.\n\n" +
			"A keyspace whose marker exists (initialised before, or workers ran in it) is left alone:\n" +
			"init is then a no-op, exit 0. Run it before the first worker, never right after Redis\n" +
			"lost data while workers ran.",
		Flags: append(adminFlags(), &cli.IntFlag{Name: flagScanLimit, Value: lease.DefaultInitScanLimit, Sources: fromEnv(flagScanLimit),
			Usage: "scan a Redis server only if it holds at most this many keys (0 = whatever the size); a larger one is refused"}),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			limit := cmd.Int(flagScanLimit)
			if limit < 0 {
				return usageError(fmt.Errorf("init: --%s (%d) must not be negative (0 = no limit)", flagScanLimit, limit))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				if err := claimSessionPrefix(ctx, a.client, a.keys); err != nil {
					return err
				}
				res, err := lease.InitKeyspace(ctx, a.client, a.keys, int64(limit))
				w := cmd.Root().Writer
				switch {
				case errors.Is(err, lease.ErrInUse):
					return usageError(fmt.Errorf("init: refused, keyspace %q was used: %w; its loss marker is missing, so Redis lost data there "+
						"(or an older version wrote it): the workers wait out one loss quarantine and go on by themselves", a.keys.Prefix, err))
				case errors.Is(err, lease.ErrTooLarge):
					return usageError(fmt.Errorf("%w; --%s 0 scans it all the same", err, flagScanLimit))
				case err != nil:
					return err
				case res.Written == 0:
					fmt.Fprintf(w, "keyspace %q is initialised already (its loss marker exists): nothing to do\n", a.keys.Prefix)
				default:
					fmt.Fprintf(w, "keyspace %q is new (%s checked: no worker, lease, fencing record or counter, handoff mark, token high-water mark or state): "+
						"declared fresh, the first workers take their leases at once\n", a.keys.Prefix, plural(int(res.Checked), "key"))
				}
				return nil
			})
		}),
	}
}
