package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
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
	if cmd.Duration(flagWatch) > 0 {
		// A watch runs until interrupted; each refresh is bounded instead.
		return withAdminSteps(ctx, cmd, fn)
	}
	return withAdminSteps(ctx, cmd, func(ctx context.Context, a admin) error {
		ctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		return fn(ctx, a)
	})
}

// withAdminSteps is withAdmin for a command that bounds each of its steps
// by a.timeout itself (a watch's refreshes, apply's chunks): fn's context
// has no deadline.
func withAdminSteps(ctx context.Context, cmd *cli.Command, fn func(ctx context.Context, a admin) error) error {
	conn, err := parseConn(connOptionsFrom(cmd))
	if err != nil {
		return configError(err)
	}
	timeout := cmd.Duration(flagTimeout)
	if err := validateTimeout(timeout); err != nil {
		return configError(err)
	}
	if err := validateWatch(cmd.Duration(flagWatch)); err != nil {
		return configError(err)
	}
	conn.Redis.ClientName = "pollworker-cli"
	client := conn.newClient()
	defer func() { _ = client.Close() }()
	store, err := session.NewStore(client, conn.Keys, session.WithKeyspaceURLRule())
	if err != nil {
		return configError(err)
	}
	err = fn(ctx, admin{client: client, keys: conn.Keys, store: store, timeout: timeout})
	if serr := sentinelNotServer(ctx, client, conn, err); serr != nil {
		return serr
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// A command that retried until its deadline (sessions list reads
		// its buckets in parallel) may hide a mistake no retry fixes,
		// such as a master no sentinel monitors: a PING says.
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		perr := client.Ping(pctx).Err()
		cancel()
		if aerr := authError(perr, conn); aerr != nil {
			return aerr
		}
	}
	var partly causedBy
	if aerr := authError(err, conn); aerr != nil && !errors.As(err, &partly) {
		return aerr // (a partial failure keeps its own message: what was changed)
	}
	if redis.HasErrorPrefix(err, "OOM") {
		// Redis's own words ("OOM command not allowed when used memory >
		// 'maxmemory'") say what, not what to do.
		return fmt.Errorf("%w: Redis is over its maxmemory and refuses writes; free memory or raise maxmemory, then run the command again (the workers keep polling what they hold meanwhile)", err)
	}
	return err
}

// claimSessionPrefix records that the session prefix holds this key
// prefix's sessions, unless one is recorded (session.ClaimNamespace, as
// the session store does before it first writes a definition), and
// returns an exit-2 error when it holds another's: the worker would be
// planned sessions whose definitions are another fleet's. A client that
// may not write it (an ACL, a replica) only checks. Commands that only
// read do not claim, and may read through another fleet's session prefix
// (sessions export, to move a fleet to a prefix of its own); the store
// refuses their writes.
func claimSessionPrefix(ctx context.Context, client redis.UniversalClient, keys keyspace.Space) error {
	err := session.ClaimNamespace(ctx, client, keys)
	if redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "READONLY") {
		err = session.CheckNamespace(ctx, client, keys)
	}
	if errors.Is(err, session.ErrNamespaceOwned) {
		return configError(err)
	}
	return err
}

func sessionsCommand() *cli.Command {
	return &cli.Command{
		Name:  "sessions",
		Usage: "add, list, get, pause, resume, remove, apply and export sessions",
		Flags: adminFlags(),
		Commands: []*cli.Command{
			sessionsAddCommand(),
			sessionsListCommand(),
			sessionsGetCommand(),
			sessionsEachCommand(eachOp{name: "pause", usage: "stop polling sessions, keeping them", done: "paused",
				apply: (*session.Store).Pause, check: checkWellFormed}),
			sessionsEachCommand(eachOp{name: "resume", usage: "poll paused sessions again", done: "resumed",
				apply: (*session.Store).Resume, check: checkWellFormed}),
			sessionsEachCommand(eachOp{name: "rm", aliases: []string{"remove"}, usage: "remove sessions", done: "removed",
				apply: (*session.Store).Delete, check: checkEntry, anyID: true}),
			sessionsApplyCommand(),
			sessionsSyncCommand(),
			sessionsReweighCommand(),
			sessionsExportCommand(),
			sessionsConfigCommand(),
		},
	}
}

func sessionsAddCommand() *cli.Command {
	return &cli.Command{
		Name:  "add",
		Usage: "add a session (polled over HTTP on its interval, or at the slots of its schedule)",
		UsageText: "pollworker sessions add --id ID --url URL (--interval 5s | --schedule 'CRON' [--tz ZONE] [--jitter D] [--catchup skip|latest|all] [--catchup-window D])\n" +
			"    [--label k=v ...] [--selector k=v,...] [--paused] [--replace]\n" +
			"    [--method POST] [--header 'Accept: application/json' ...] [--body TEXT | --body-file FILE] [--expect 200-299,304] [--profile NAME] [--poll-timeout D]",
		// --label a=b,c keeps its comma: one label per --label.
		DisableSliceFlagSeparator: true,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "session id: letters, digits and . _ - : @ /", Required: true},
			&cli.StringFlag{Name: "url", Usage: "what to poll: an absolute http or https URL with a host", Required: true},
			&cli.DurationFlag{Name: "interval", HideDefault: true, Usage: "time between the starts of two polls, from 10ms to 24h (or --schedule); after a start or a change a poll may come up to a tenth of it later, for about ten polls, while the worker spreads its sessions over the interval"},
			&cli.StringSliceFlag{Name: "label", Usage: "metadata key=value; repeat for several"},
			&cli.BoolFlag{Name: "paused", Usage: "add it paused (polled by nobody until resumed)"},
			&cli.BoolFlag{Name: "replace", Usage: "overwrite an existing session of that id"},
			&cli.StringFlag{Name: "selector", Usage: "key=value,…: only workers whose --labels include all of these poll it"},
		}, append(requestFlags(), scheduleFlags()...)...),
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
				Selector: cmd.String("selector"),
			}
			s = withScheduleFlags(s, cmd)
			if c, err := nodes.CanonicalSelector(s.Selector); err == nil {
				s.Selector = c
			}
			if err := requestFromFlags(cmd, &s); err != nil {
				return usageError(fmt.Errorf("invalid session: %w", err))
			}
			if err := s.ValidateForWrite(); err != nil {
				return usageError(fmt.Errorf("invalid session: %s", sessionProblem(err)))
			}
			// What the store checks too; only a keyspace whose URL rule is
			// "any" takes a URL the built-in poller cannot GET.
			notHTTP := session.HTTPURL(s.URL)
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				if notHTTP != nil {
					if err := checkURLRule(ctx, a, notHTTP); err != nil {
						return err
					}
				}
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
				warnUnmatchedSelectors(ctx, a, cmd.Root().ErrWriter, "sessions add", []session.Session{s})
				return nil
			})
		}),
	}
}

// warnUnmatchedSelectors prints a warning to w, prefixed by cmdName, for
// each selector of sessions that no live worker's labels match: their
// sessions are polled by nobody until such a worker joins. Not an error:
// the worker may be about to start. A failed read of the workers is
// warned about too.
func warnUnmatchedSelectors(ctx context.Context, a admin, w io.Writer, cmdName string, sessions []session.Session) {
	count := make(map[string]int)    // selector -> sessions
	profiles := make(map[string]int) // profile -> sessions
	for _, s := range sessions {
		if sel := s.SelectorKey(); sel != "" {
			count[sel]++
		}
		if s.Profile != "" {
			profiles[s.Profile]++
		}
	}
	if len(count) == 0 && len(profiles) == 0 {
		return
	}
	p, err := bounded(ctx, a, func(ctx context.Context) (*fleet.Snapshot, error) {
		r, err := newFleetReader(a, poller.DefaultLeaseTTL)
		if err != nil {
			return nil, err
		}
		return r.ReadFleet(ctx)
	})
	if err != nil {
		fmt.Fprintf(w, "pollworker: %s: warning: could not check the selectors and profiles against the live workers: %v\n", cmdName, err)
		return
	}
	for _, sel := range slices.Sorted(maps.Keys(count)) {
		if s, err := fleet.ParseSelector(sel); err != nil || !p.Placement.Placeable(s) {
			fmt.Fprintf(w, "pollworker: %s: warning: no live worker's --labels match selector %s (%s; %s): "+
				"polled by nobody until a worker with these labels joins\n",
				cmdName, sel, plural(count[sel], "session"), plural(len(p.Members.Placeable()), "placeable live worker"))
		}
	}
	// A worker announces each of its profiles as the label
	// profile/<name>=yes (pollworker run --profiles).
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		if s, err := fleet.ParseSelector(httppoll.ProfileLabel(name) + "=" + httppoll.ProfileLabelValue); err != nil || !p.Placement.Placeable(s) {
			fmt.Fprintf(w, "pollworker: %s: warning: no live worker has profile %s (pollworker run --profiles) (%s; %s): "+
				"a worker without it does not poll them and reports \"profile %s: not configured\"\n",
				cmdName, name, plural(profiles[name], "session"), plural(len(p.Members.Placeable()), "placeable live worker"), name)
		}
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

// eachOp is a sessions command that changes every session named.
type eachOp struct {
	name, usage string
	aliases     []string // other names of the command (rm: remove)
	done        string   // past tense, printed before each id changed
	apply       func(*session.Store, context.Context, string) error
	// check says whether the session id can be changed: nil, or why not
	// (wrapping session.ErrNotFound when there is nothing to change).
	check func(ctx context.Context, a admin, id string) error
	// anyID accepts an id that keyspace.ValidateID refuses when an entry
	// of it exists (rm of an entry that `sessions list` shows malformed).
	anyID bool
}

// eachDescription is the --help text of pause, resume and rm: what is
// checked and what is guaranteed.
const eachDescription = "Every ID is checked before anything changes: it must be a valid session id and\n" +
	"name an existing session (%s).\n" +
	"If any check fails, nothing is changed; the exit status is 2 for an invalid id, 1 otherwise.\n\n" +
	"Then the sessions are changed one by one, in the order given. That is not one atomic\n" +
	"write (the sessions may live in different Redis Cluster slots): if another client\n" +
	"removes a session after the check, or Redis fails midway, the command stops at that\n" +
	"id and names the ids %s and those not attempted."

// sessionsEachCommand checks every id argument with op.check, then, if all
// pass, applies op.apply to each in turn.
func sessionsEachCommand(op eachOp) *cli.Command {
	which := "one that \"sessions list\" does not show as malformed"
	if op.anyID {
		which = "or an entry \"sessions list\" shows as malformed, whatever its id"
	}
	return &cli.Command{
		Name:        op.name,
		Aliases:     op.aliases,
		Usage:       op.usage + " (all named, or none if one is invalid or missing)",
		ArgsUsage:   "ID...",
		Description: fmt.Sprintf(eachDescription, which, op.done),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			ids := uniq(cmd.Args().Slice())
			if len(ids) == 0 {
				return usageError(fmt.Errorf("sessions %s: give at least one session id", op.name))
			}
			var invalid []string // ids that keyspace.ValidateID refuses
			for _, id := range ids {
				if err := keyspace.ValidateID(id); err != nil {
					invalid = append(invalid, id)
				}
			}
			if len(invalid) > 0 && !op.anyID {
				return usageError(fmt.Errorf("sessions %s: nothing changed: %s", op.name, invalidIDs(invalid)))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				if err := checkAll(ctx, a, op, ids); err != nil {
					return err
				}
				w := cmd.Root().Writer
				for i, id := range ids {
					if err := op.apply(a.store, ctx, id); err != nil {
						done := ids[:i]
						if errors.Is(err, session.ErrNotRecorded) {
							done = ids[:i+1] // written, unseen by the workers
						}
						failed := causedBy{fmt.Sprintf("sessions %s: %s", op.name, partial(op.done, done, id, err, ids[i+1:])), err}
						if errors.Is(err, session.ErrNamespaceOwned) {
							return configError(failed) // another fleet's session prefix: refused before any write
						}
						if i == 0 && !errors.Is(err, session.ErrNotRecorded) && authProblem(err) != "" {
							return err // refused before any write (an ACL): withAdmin explains it, exit 2
						}
						return failed
					}
					fmt.Fprintf(w, "%s %s\n", op.done, id)
				}
				return nil
			})
		}),
	}
}

// checkAll runs op.check on every id and returns one error naming every
// problem, or nil if all ids can be changed.
func checkAll(ctx context.Context, a admin, op eachOp, ids []string) error {
	var (
		invalid  []string
		problems []string
	)
	for _, id := range ids {
		err := op.check(ctx, a, id)
		switch {
		case err == nil:
		case errors.Is(err, session.ErrNotFound) && keyspace.ValidateID(id) != nil:
			invalid = append(invalid, id)
		case errors.Is(err, session.ErrNotFound):
			problems = append(problems, fmt.Sprintf("session %s not found", id))
		case errors.Is(err, session.ErrMalformed):
			// Keep the reason only: the id is named already.
			_, reason, _ := strings.Cut(err.Error(), session.ErrMalformed.Error()+": ")
			problems = append(problems, fmt.Sprintf("session %s is malformed (%s): add it again with --replace or remove it", id, reason))
		default:
			return fmt.Errorf("sessions %s: nothing changed: check %s: %w", op.name, printableID(id), err)
		}
	}
	if len(invalid) > 0 {
		return usageError(fmt.Errorf("sessions %s: nothing changed: %s", op.name, invalidIDs(invalid)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("sessions %s: nothing changed: %s", op.name, strings.Join(problems, "; "))
	}
	return nil
}

// checkWellFormed is the check of pause and resume: the session exists and
// its stored value is valid.
func checkWellFormed(ctx context.Context, a admin, id string) error {
	_, err := a.store.Get(ctx, id)
	return err
}

// checkEntry is the check of rm: the session key or its index entry
// exists (Delete removes either).
func checkEntry(ctx context.Context, a admin, id string) error {
	var exists *redis.IntCmd
	var isMember *redis.BoolCmd
	_, err := a.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, a.keys.Session(id))
		isMember = p.SIsMember(ctx, a.keys.SessionBucketOf(id), id)
		return nil
	})
	if err != nil {
		return err
	}
	if exists.Val() == 0 && !isMember.Val() {
		return session.ErrNotFound
	}
	return nil
}

// invalidIDs names ids refused by keyspace.ValidateID, with the reason of
// each, in one line.
func invalidIDs(ids []string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = "invalid session id " + idProblemOf(id)
	}
	return strings.Join(parts, "; ")
}

// idProblemOf is the reason keyspace.ValidateID refuses id, led by the id
// when the reason does not quote it.
func idProblemOf(id string) string {
	var ie *keyspace.IDError
	if err := keyspace.ValidateID(id); !errors.As(err, &ie) {
		return printableID(id)
	}
	if strings.HasPrefix(ie.Reason, `"`) {
		return ie.Reason
	}
	return fmt.Sprintf("%.64q: %s", id, ie.Reason)
}

// partial describes a command stopped by err at id: the ids changed
// before it and those not attempted after it.
func partial(done string, before []string, id string, err error, after []string) string {
	var b strings.Builder
	if len(before) > 0 {
		fmt.Fprintf(&b, "%s %s; ", done, strings.Join(before, ", "))
	} else {
		b.WriteString("nothing changed; ")
	}
	fmt.Fprintf(&b, "failed on %s: %v", printableID(id), err)
	if len(after) > 0 {
		fmt.Fprintf(&b, "; not attempted: %s", strings.Join(after, ", "))
	}
	return b.String()
}

// causedBy is an error whose message already says its cause (partial),
// and which unwraps to it, so that withAdmin can explain the cause.
type causedBy struct {
	msg   string
	cause error
}

func (e causedBy) Error() string { return e.msg }
func (e causedBy) Unwrap() error { return e.cause }

// uniq returns ids without repeats, in their first order.
func uniq(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func sessionsListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the sessions and the malformed entries",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "wide", Usage: "add the HTTP poller's saved state of each session (last status, latency, last success, failures in a row, last change, saved by; see sessions get); last success reads current while no failure was saved since a state refreshed within a minute and an interval: every poll since succeeded"},
			&cli.BoolFlag{Name: "failing", Usage: "only the sessions of the whole fleet whose last poll failed, from their saved state in Redis: last status, failures in a row, since when, last error message"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				snap, err := a.store.Load(ctx)
				if err != nil {
					return err
				}
				sessions, problems := snap.Sessions, snap.Malformed
				if snap.BadRecord != nil {
					fmt.Fprintf(cmd.Root().ErrWriter, "pollworker: sessions list: %v\n", snap.BadRecord)
				}
				if cmd.Bool("failing") {
					states, err := loadStates(ctx, a, sessions)
					if err != nil {
						return err
					}
					return printFailing(cmd.Root().Writer, cmd.Bool("json"), failingOf(sessions, states))
				}
				var states map[string]*stateView // nil without --wide
				var slots map[string]*slotsView
				if cmd.Bool("wide") {
					if states, err = loadStates(ctx, a, sessions); err != nil {
						return err
					}
					if slots, err = loadSlotViews(ctx, a, sessions, time.Now()); err != nil {
						return err
					}
				}
				if cmd.Bool("json") {
					return printSessionsJSON(cmd.Root().Writer, sessions, problems, states, slots)
				}
				printSessions(cmd.Root().Writer, sessions, problems, states, slots)
				return nil
			})
		}),
	}
}

// listedSession is a session as printed by sessions list --json.
type listedSession struct {
	ID       string            `json:"id"`
	URL      string            `json:"url"`
	Interval string            `json:"interval,omitempty"`
	Paused   bool              `json:"paused"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Selector is the labels a worker needs to poll it (empty: any worker).
	Selector string `json:"selector,omitempty"`
	// Method, Headers, Body, Expect, Profile and Timeout are the request
	// (session.Session); Method and Expect with their defaults filled in,
	// Timeout empty for the worker's.
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	Expect  string            `json:"expect"`
	Profile string            `json:"profile,omitempty"`
	Timeout string            `json:"timeout,omitempty"`
	// The schedule of a scheduled session (with its defaults filled in).
	scheduleView
	// Slots are a scheduled session's next and last slots, with --wide
	// only.
	Slots *slotsView `json:"slots,omitempty"`
	// State is the saved state, with --wide only (null when none).
	State *stateView `json:"state,omitempty"`
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

// printSessionsJSON prints the sessions, with their states when states is
// not nil (--wide).
func printSessionsJSON(w io.Writer, sessions []session.Session, problems []session.Problem, states map[string]*stateView, slots map[string]*slotsView) error {
	out := struct {
		Sessions  []listedSession  `json:"sessions"`
		Malformed []malformedEntry `json:"malformed"`
	}{Sessions: make([]listedSession, len(sessions)), Malformed: malformedEntries(problems)}
	for i, s := range sessions {
		out.Sessions[i] = listedOf(s)
		out.Sessions[i].State = states[s.ID]
		out.Sessions[i].Slots = slots[s.ID]
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// printSessions prints the sessions as a table, with the columns of their
// states when states is not nil (--wide).
func printSessions(w io.Writer, sessions []session.Session, problems []session.Problem, states map[string]*stateView, slots map[string]*slotsView) {
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	paused := 0
	if len(sessions) > 0 {
		fmt.Fprint(tw, "ID\tURL\tINTERVAL\tPAUSED\tLABELS\tSELECTOR")
		if states != nil {
			fmt.Fprint(tw, wideColumns)
			if len(slots) > 0 { // a column for scheduled sessions, when there are some
				fmt.Fprint(tw, "\tSLOTS")
			}
		}
		fmt.Fprintln(tw)
	}
	for _, s := range sessions {
		p := "no"
		if s.Paused {
			p = "yes"
			paused++
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s", s.ID, redactURL(s.URL), timingText(s), p, formatLabels(s.Labels), dash(s.Selector))
		if states != nil {
			fmt.Fprint(tw, wideRow(states[s.ID], s))
			if len(slots) > 0 {
				fmt.Fprint(tw, slotsCell(slots[s.ID], now))
			}
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%s: %d active, %d paused; %d malformed\n", plural(len(sessions), "session"), len(sessions)-paused, paused, len(problems))
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

func formatLabels(labels map[string]string) string { return formatPairs(labels, "=", ",") }

// formatPairs prints m's pairs sorted by key, key and value joined by kv,
// pairs by sep; "-" for none.
func formatPairs(m map[string]string, kv, sep string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + kv + m[k]
	}
	return strings.Join(parts, sep)
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
