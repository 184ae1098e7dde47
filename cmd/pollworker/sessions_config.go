package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/session"
)

// flagURLRule sets the keyspace's URL rule (sessions config).
const flagURLRule = "url-rule"

func sessionsConfigCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "show or set the keyspace's session settings (the URL rule)",
		UsageText: "pollworker sessions config                  print the settings\n" +
			"pollworker sessions config --url-rule any   accept any non-blank target",
		Description: "The settings live in Redis (<key-prefix>:{sessions}:settings), so that every operator\n" +
			"and tool writing sessions to the keyspace applies the same rules.\n\n" +
			"  url-rule  http (the default): sessions add and apply take only absolute http or https URLs\n" +
			"            with a host, what the built-in HTTP poller can GET;\n" +
			"            any: any non-blank target, for an embedder's own poller (serial:/dev/ttyUSB0,\n" +
			"            say). A pollworker run worker answers a target it cannot GET with a failed poll.\n\n" +
			"A change applies to later writes; the stored sessions are neither checked nor changed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagURLRule, Usage: "http or any: what URLs sessions add and apply accept"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			var want session.URLRule
			if cmd.IsSet(flagURLRule) {
				r, err := session.ParseURLRule(cmd.String(flagURLRule))
				if err != nil {
					return usageError(fmt.Errorf("sessions config: --%s %.20q must be http or any", flagURLRule, cmd.String(flagURLRule)))
				}
				want = r
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				w := cmd.Root().Writer
				was, err := a.store.URLRule(ctx)
				if err != nil && want == "" {
					return fmt.Errorf("sessions config: %w", err)
				}
				if want == "" {
					fmt.Fprintf(w, "url-rule: %s\n", was)
					return nil
				}
				if err := a.store.SetURLRule(ctx, want); err != nil {
					return fmt.Errorf("sessions config: %w", err)
				}
				if was == "" {
					was = "unreadable"
				}
				fmt.Fprintf(w, "url-rule: %s (was %s)\n", want, was)
				return nil
			})
		}),
	}
}

// checkURLRule returns nil when the keyspace's URL rule accepts a URL that
// session.HTTPURL refused with notHTTP, else an exit-2 error naming the
// rule and how to change it.
func checkURLRule(ctx context.Context, a admin, notHTTP error) error {
	r, err := a.store.URLRule(ctx)
	if err != nil {
		return err
	}
	if r.Check() == nil {
		return nil
	}
	return usageError(fmt.Errorf("invalid session: %s (the keyspace's url-rule is %s; see sessions config --%s)",
		sessionProblem(notHTTP), r, flagURLRule))
}
