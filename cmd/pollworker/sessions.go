package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// admin is what a one-shot command works with.
type admin struct {
	// timeout bounds one command, or one refresh of a watch.
	timeout time.Duration
	client  redis.UniversalClient
	keys    keyspace.Space
	store   *session.Store
}

// withAdmin validates the connFlags and --timeout of cmd, connects (lazily)
// and runs fn under a context bounded by --timeout.
func withAdmin(ctx context.Context, cmd *cli.Command, fn func(ctx context.Context, a admin) error) error {
	conn, err := parseConn(connOptionsFrom(cmd))
	if err != nil {
		return configError(err)
	}
	timeout := cmd.Duration(flagTimeout)
	if timeout <= 0 {
		return configError(fmt.Errorf("--%s (%v) must be positive", flagTimeout, timeout))
	}
	conn.Redis.ClientName = "pollworker-cli"
	client := conn.newClient()
	defer func() { _ = client.Close() }()
	store, err := session.NewStore(client, conn.Keys)
	if err != nil {
		return configError(err)
	}
	a := admin{client: client, keys: conn.Keys, store: store, timeout: timeout}
	if cmd.Duration(flagWatch) > 0 {
		// A watch runs until interrupted; each refresh is bounded instead.
		return fn(ctx, a)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx, a)
}

func sessionsCommand() *cli.Command {
	return &cli.Command{
		Name:  "sessions",
		Usage: "add, list, pause, resume and remove sessions",
		Flags: adminFlags(),
		Commands: []*cli.Command{
			sessionsAddCommand(),
			sessionsListCommand(),
			sessionsEachCommand("pause", "stop polling sessions, keeping them", "paused", (*session.Store).Pause),
			sessionsEachCommand("resume", "poll paused sessions again", "resumed", (*session.Store).Resume),
			sessionsEachCommand("rm", "remove sessions", "removed", (*session.Store).Delete),
		},
	}
}

func sessionsAddCommand() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add a session (polled with HTTP GET on its interval)",
		UsageText: "pollworker sessions add --id ID --url URL --interval 5s [--label k=v ...] [--paused] [--replace]",
		// --label a=b,c keeps its comma: one label per --label.
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "session id: letters, digits and . _ - : @ /", Required: true},
			&cli.StringFlag{Name: "url", Usage: "what to poll: an absolute http or https URL with a host", Required: true},
			&cli.DurationFlag{Name: "interval", Usage: "time between the starts of two polls, from 10ms to 24h", Required: true},
			&cli.StringSliceFlag{Name: "label", Usage: "metadata key=value; repeat for several"},
			&cli.BoolFlag{Name: "paused", Usage: "add it paused (polled by nobody until resumed)"},
			&cli.BoolFlag{Name: "replace", Usage: "overwrite an existing session of that id"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			labels, err := parseLabels(cmd.StringSlice("label"))
			if err != nil {
				return usageError(err)
			}
			s := session.Session{
				ID:       cmd.String("id"),
				URL:      cmd.String("url"),
				Interval: session.Duration(cmd.Duration("interval")),
				Paused:   cmd.Bool("paused"),
				Labels:   labels,
			}
			err = s.Validate()
			if err == nil {
				// What the store checks too, but before connecting.
				err = session.HTTPURL(s.URL)
			}
			if err != nil {
				return usageError(fmt.Errorf("invalid session: %s", sessionProblem(err)))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				verb := "added"
				switch _, err := a.store.Get(ctx, s.ID); {
				case err == nil || errors.Is(err, session.ErrMalformed):
					if !cmd.Bool("replace") {
						return fmt.Errorf("session %s exists (use --replace to overwrite it)", s.ID)
					}
					verb = "replaced"
				case !errors.Is(err, session.ErrNotFound):
					return err
				}
				if err := a.store.Put(ctx, s); err != nil {
					return err
				}
				fmt.Fprintf(cmd.Root().Writer, "%s session %s\n", verb, s.ID)
				return nil
			})
		}),
	}
}

// sessionProblem says what is wrong with a session refused by
// session.Session.Validate or session.HTTPURL, without the package
// prefixes: "<field> <rule>".
func sessionProblem(err error) string {
	var fe *session.FieldError
	if errors.As(err, &fe) {
		return fe.Field + " " + fe.Reason
	}
	return err.Error()
}

// parseLabels turns k=v pairs into a map; keys must be non-empty and
// distinct.
func parseLabels(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	labels := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q must be key=value", p)
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("--label key %q given twice", k)
		}
		labels[k] = v
	}
	return labels, nil
}

// sessionsEachCommand applies op to every id argument.
func sessionsEachCommand(name, usage, done string, op func(*session.Store, context.Context, string) error) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: "ID...",
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			ids := cmd.Args().Slice()
			if len(ids) == 0 {
				return usageError(fmt.Errorf("sessions %s: give at least one session id", name))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				var errs []error
				for _, id := range ids {
					if err := op(a.store, ctx, id); err != nil {
						errs = append(errs, err)
						continue
					}
					fmt.Fprintf(cmd.Root().Writer, "%s %s\n", done, id)
				}
				return errors.Join(errs...)
			})
		}),
	}
}

func sessionsListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the sessions and the malformed entries",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				sessions, problems, err := a.store.List(ctx)
				if err != nil {
					return err
				}
				if cmd.Bool("json") {
					return printSessionsJSON(cmd.Root().Writer, sessions, problems)
				}
				printSessions(cmd.Root().Writer, sessions, problems)
				return nil
			})
		}),
	}
}

// listedSession is a session as printed by sessions list --json.
type listedSession struct {
	ID       string            `json:"id"`
	URL      string            `json:"url"`
	Interval string            `json:"interval"`
	Paused   bool              `json:"paused"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// malformedEntry is a malformed entry as printed by sessions list and
// status.
type malformedEntry struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func malformedEntries(problems []session.Problem) []malformedEntry {
	out := make([]malformedEntry, len(problems))
	for i, p := range problems {
		out[i] = malformedEntry{ID: p.ID, Reason: p.Err.Error()}
	}
	return out
}

func printSessionsJSON(w io.Writer, sessions []session.Session, problems []session.Problem) error {
	out := struct {
		Sessions  []listedSession  `json:"sessions"`
		Malformed []malformedEntry `json:"malformed"`
	}{Sessions: make([]listedSession, len(sessions)), Malformed: malformedEntries(problems)}
	for i, s := range sessions {
		out.Sessions[i] = listedSession{ID: s.ID, URL: redactURL(s.URL), Interval: s.Interval.D().String(), Paused: s.Paused, Labels: s.Labels}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func printSessions(w io.Writer, sessions []session.Session, problems []session.Problem) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	paused := 0
	if len(sessions) > 0 {
		fmt.Fprintln(tw, "ID\tURL\tINTERVAL\tPAUSED\tLABELS")
	}
	for _, s := range sessions {
		p := "no"
		if s.Paused {
			p = "yes"
			paused++
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", s.ID, redactURL(s.URL), s.Interval.D(), p, formatLabels(s.Labels))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d sessions: %d active, %d paused; %d malformed\n", len(sessions), len(sessions)-paused, paused, len(problems))
	for _, m := range malformedEntries(problems) {
		fmt.Fprintf(w, "  malformed %s: %s\n", printableID(m.ID), m.Reason)
	}
}

// printableID returns id, quoted if it is not a valid id (an index entry may
// hold any bytes).
func printableID(id string) string {
	if keyspace.ValidateID(id) == nil {
		return id
	}
	return fmt.Sprintf("%.64q", id)
}

func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// redactURL hides the password of a URL, as url.URL.Redacted does. A target
// that does not parse as a URL is hidden too, since its password cannot be
// found.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "(unparsable URL, hidden)"
	case u.User == nil:
		return raw
	}
	return u.Redacted()
}
