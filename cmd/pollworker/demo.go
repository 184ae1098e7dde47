package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"
	"go.uber.org/zap/zapcore"

	"github.com/pollworker/pollworker/internal/demo"
)

// demoOptions are the demo command's flags.
type demoOptions struct {
	Duration time.Duration
	Workers  int
	Sessions int
	Plain    bool
	Verbose  bool
}

func (o demoOptions) validate() error {
	switch {
	case o.Duration < time.Second || o.Duration > 10*time.Minute:
		return fmt.Errorf("--duration (%v) must be between 1s and 10m", o.Duration)
	case o.Workers < 2 || o.Workers > 8:
		return fmt.Errorf("--workers (%d) must be between 2 and 8", o.Workers)
	case o.Sessions < 1 || o.Sessions > 100:
		return fmt.Errorf("--sessions (%d) must be between 1 and 100", o.Sessions)
	}
	return nil
}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "watch in-process workers share sessions, hand them off and take in a newcomer (no Redis needed)",
		Description: "Starts an embedded Redis (miniredis), 3 HTTP targets on 127.0.0.1 and --workers workers\n" +
			"polling --sessions sessions (intervals 200-500ms) with short timings (lease TTL 1.5s,\n" +
			"renewal 500ms, heartbeat 300ms, discovery 500ms). After a third of --duration it stops\n" +
			"worker-2 gracefully and shows its sessions moving; a little later a newcomer joins and\n" +
			"takes its share. Before each change it prints where the planner the workers use puts\n" +
			"every session; after it, where the sessions went, as recorded from the workers' lease\n" +
			"events. At the end it checks, from the recorded polls and their fencing tokens, that no\n" +
			"session was ever polled by two workers at once (exit 1 otherwise).\n" +
			"Crashes are not simulated: a worker in this process can only stop gracefully.\n\n" +
			"It prints the address of its embedded Redis and a command that runs the leader-election\n" +
			"example against it from a second terminal (go run ./examples/election --redis ADDR);\n" +
			"give it time with --duration 2m. Ctrl-C ends the demo early, with its summary.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: 12 * time.Second, Usage: "how long the demo runs"},
			&cli.IntFlag{Name: "workers", Value: 3, Usage: "workers at start (2-8); one more joins later"},
			&cli.IntFlag{Name: "sessions", Value: 30, Usage: "number of sessions (1-100)"},
			&cli.BoolFlag{Name: "plain", Usage: "print periodic lines even on a terminal"},
			&cli.BoolFlag{Name: "verbose", Usage: "log the workers' events to stderr"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			o := demoOptions{
				Duration: cmd.Duration("duration"),
				Workers:  cmd.Int("workers"),
				Sessions: cmd.Int("sessions"),
				Plain:    cmd.Bool("plain"),
				Verbose:  cmd.Bool("verbose"),
			}
			if err := o.validate(); err != nil {
				return usageError(fmt.Errorf("demo: %w", err))
			}
			do := demo.Options{Duration: o.Duration, Workers: o.Workers, Sessions: o.Sessions, Plain: o.Plain, Version: version}
			if o.Verbose {
				do.Logger = newLogger(cmd.Root().ErrWriter, zapcore.InfoLevel, "console")
			}
			_, err := demo.Run(ctx, do, cmd.Root().Writer)
			return err
		}),
	}
}
