package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/session"
)

// applyChunk is the number of sessions apply writes with one
// session.Store.PutMany (one revision bump, one --timeout), and removes
// with one DeleteMany.
const applyChunk = 10000

// maxFileBytes bounds a sessions file: about two million sessions.
const maxFileBytes = 256 << 20

const applyDescription = `Makes the sessions in Redis what FILE says (YAML or JSON; "-" reads stdin):

  sessions:
    - id: api-1
      url: https://api.example.com/health
      interval: 30s
      labels: {team: core}     # optional; the file's labels replace the stored ones
      selector: zone=eu-1      # optional; only workers with --labels including it poll it
      paused: false            # optional; see below

The whole file is checked before anything is written: every id, URL and
interval, ids repeated across entries, unknown or repeated fields. Each problem
is printed on its own line naming the entry; then the command exits with status
2 and writes nothing.

Sessions whose id, url, interval and labels already match are left alone, so a
second apply writes nothing and does not bump the session revision (the workers
do not reread). New and changed sessions are written with PutMany in chunks of
10000, each bounded by --timeout and announced to the workers once.

"paused": an entry that says paused: true or false sets it; an entry without it
keeps the state the session has in Redis (a new session starts unpaused), so
"sessions pause" during an incident survives a periodic re-apply.

--prune removes the sessions that are not in the file. It refuses a file with no
sessions (an empty ConfigMap must not wipe a fleet) unless --allow-empty is
given. Malformed entries are never removed: they are counted and kept; an entry
of the file with the same id replaces one. --dry-run prints the diff
("+ id", "~ id field: old → new", "- id") and writes nothing.

Not atomic: a session changed by another client between the read and the write
may be overwritten; a failure midway leaves the chunks written so far, and
rerunning apply finishes the job.`

func sessionsApplyCommand() *cli.Command {
	return &cli.Command{
		Name:        "apply",
		Usage:       "make the sessions in Redis match a YAML or JSON file (idempotent)",
		UsageText:   "pollworker sessions apply -f FILE [--prune [--allow-empty]] [--dry-run]",
		Description: applyDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: `sessions file, YAML or JSON; "-" for stdin`, Required: true},
			&cli.BoolFlag{Name: "prune", Usage: "remove the sessions that are not in the file (never malformed entries)"},
			&cli.BoolFlag{Name: "allow-empty", Usage: "with --prune, accept a file of no sessions (removes every session)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would change and write nothing"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			path := cmd.String("file")
			name := path
			if path == "-" {
				name = "stdin"
			}
			raw, err := readSessionsFile(cmd, path)
			if err != nil {
				return usageError(fmt.Errorf("sessions apply: %w; nothing written", err))
			}
			entries, err := session.ParseFile(raw, session.HTTPURL)
			return withAdminSteps(ctx, cmd, func(ctx context.Context, a admin) error {
				var fe *session.FileError
				if errors.As(err, &fe) {
					// Only a keyspace whose URL rule is "any" takes URLs the
					// built-in poller cannot GET: check the file by its rule.
					// Unread, the http rule stands.
					rule, rerr := bounded(ctx, a, a.store.URLRule)
					if rerr == nil && rule.Check() == nil {
						entries, err = session.ParseFile(raw, nil)
					}
					if errors.As(err, &fe) {
						w := cmd.Root().ErrWriter
						for _, line := range strings.Split(fe.Error(), "\n") {
							fmt.Fprintf(w, "pollworker: sessions apply: %s: %s\n", name, line)
						}
						switch {
						case rerr != nil:
							fmt.Fprintf(w, "pollworker: sessions apply: the keyspace's url-rule could not be read (%v): URLs were checked by the http rule\n", rerr)
						case rule.Check() != nil && slices.ContainsFunc(fe.Problems, func(p session.FileProblem) bool { return strings.HasPrefix(p.Reason, "url ") }):
							fmt.Fprintf(w, "pollworker: sessions apply: the keyspace's url-rule is %s (see sessions config --%s)\n", rule, flagURLRule)
						}
						return usageError(fmt.Errorf("sessions apply: %s: %s; nothing written", name, plural(fe.Total, "problem")))
					}
				}
				if len(entries) == 0 && cmd.Bool("prune") && !cmd.Bool("allow-empty") {
					return usageError(fmt.Errorf("sessions apply: %s has no sessions, and --prune would remove every session: "+
						"add --allow-empty if that is meant; nothing written", name))
				}
				return applySessions(ctx, cmd, a, entries)
			})
		}),
	}
}

// readSessionsFile reads path, or stdin for "-", up to maxFileBytes.
func readSessionsFile(cmd *cli.Command, path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = cmd.Root().Reader
		if r == nil {
			r = os.Stdin
		}
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read sessions file: %w", err)
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read sessions file: %w", err)
	}
	if len(raw) > maxFileBytes {
		return nil, fmt.Errorf("sessions file is larger than %d MiB", maxFileBytes>>20)
	}
	return raw, nil
}

// applySessions reads the sessions, plans and, unless --dry-run, writes.
func applySessions(ctx context.Context, cmd *cli.Command, a admin, entries []session.Entry) error {
	out := cmd.Root().Writer
	before, _ := bounded(ctx, a, func(ctx context.Context) (string, error) { return runIDs(ctx, a.client), nil })
	snap, err := bounded(ctx, a, func(ctx context.Context) (session.Snapshot, error) { return a.store.Load(ctx) })
	if err != nil {
		return fmt.Errorf("sessions apply: nothing written: %w", err)
	}
	p := planApply(entries, snap.Sessions, snap.Malformed, cmd.Bool("prune"))
	inFile := make([]session.Session, len(entries))
	for i, e := range entries {
		inFile[i] = e.Session
	}
	if cmd.Bool("dry-run") {
		for _, line := range p.lines {
			fmt.Fprintln(out, line)
		}
		fmt.Fprintln(out, p.summary(true))
		warnUnmatchedSelectors(ctx, a, cmd.Root().ErrWriter, "sessions apply", inFile)
		return nil
	}
	if err := writePlan(ctx, a, p, "sessions apply"); err != nil {
		return err
	}
	fmt.Fprintln(out, p.summary(false))
	after, _ := bounded(ctx, a, func(ctx context.Context) (string, error) { return runIDs(ctx, a.client), nil })
	if before != "" && after != "" && before != after {
		// Seen: Redis killed and restarted without persistence 2.6 s into
		// an apply of 100k sessions; the apply reported them all created,
		// and 4% were gone.
		return errors.New("sessions apply: Redis restarted or failed over while it ran (its run id changed): " +
			"writes acknowledged before that may be lost (a restart without persistence, a replica that lagged): run it again (it is idempotent)")
	}
	warnUnmatchedSelectors(ctx, a, cmd.Root().ErrWriter, "sessions apply", inFile)
	return reweighIfIncomplete(ctx, a, out)
}

// runIDs returns the run ids of c's masters (INFO server), sorted and
// joined, or "" when one cannot be read (an ACL without +info): a restart
// or a failover changes it.
func runIDs(ctx context.Context, c redis.UniversalClient) string {
	read := func(ctx context.Context, c redis.Cmdable) (string, bool) {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return "", false
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				return v, true
			}
		}
		return "", false
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		id, _ := read(ctx, c)
		return id
	}
	var (
		mu  sync.Mutex
		ids []string
	)
	complete := true
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		id, ok := read(ctx, m)
		mu.Lock()
		defer mu.Unlock()
		ids, complete = append(ids, id), complete && ok
		return nil
	})
	if err != nil || !complete {
		return ""
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// writePlan writes p's sessions, then prunes, applyChunk at a time; what
// names the command in its errors.
func writePlan(ctx context.Context, a admin, p applyPlan, what string) error {
	for lo := 0; lo < len(p.write); lo += applyChunk {
		chunk := p.write[lo:min(lo+applyChunk, len(p.write))]
		if _, err := bounded(ctx, a, func(ctx context.Context) (struct{}, error) { return struct{}{}, a.store.PutMany(ctx, chunk) }); err != nil {
			return fmt.Errorf("%s: wrote %d of %d sessions, pruned none, then: %w%s", what, lo, len(p.write), err, againHint(err))
		}
	}
	for lo := 0; lo < len(p.prune); lo += applyChunk {
		chunk := p.prune[lo:min(lo+applyChunk, len(p.prune))]
		if _, err := bounded(ctx, a, func(ctx context.Context) (int, error) { return a.store.DeleteMany(ctx, chunk) }); err != nil {
			return fmt.Errorf("%s: wrote %d sessions, pruned %d of %d, then: %w%s", what, len(p.write), lo, len(p.prune), err, againHint(err))
		}
	}
	return nil
}

// againHint is what to do after a failed chunk: run the command again
// (it is idempotent), unless the chunk was written but not recorded,
// which running it again would not record (its sessions read unchanged):
// the error says to reweigh.
func againHint(err error) string {
	if errors.Is(err, session.ErrNotRecorded) {
		return ""
	}
	return " (run it again: it is idempotent)"
}

// reweighIfIncomplete counts the poll loads (session.Store.RebuildLoads)
// of an index written before loads were kept, so that an apply also
// upgrades the index to load-aware balance.
func reweighIfIncomplete(ctx context.Context, a admin, out io.Writer) error {
	w, err := bounded(ctx, a, func(ctx context.Context) (session.Weights, error) { return a.store.Weights(ctx) })
	if err != nil || w.Complete {
		return err
	}
	total, err := bounded(ctx, a, func(ctx context.Context) (int64, error) { return a.store.RebuildLoads(ctx) })
	if err != nil {
		return fmt.Errorf("sessions apply: applied, but counting the poll loads failed: %w (run pollworker sessions reweigh)", err)
	}
	fmt.Fprintf(out, "counted the poll loads of the index (written before loads were kept): %d polls/day; the workers now balance by load\n", total)
	return nil
}

// bounded runs one step of a command under a.timeout.
func bounded[T any](ctx context.Context, a admin, step func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	return step(ctx)
}

// applyPlan is what apply changes: decided from plain values by planApply,
// written by applySessions.
type applyPlan struct {
	// write are the sessions to create or replace, sorted by id.
	write []session.Session
	// prune are the ids of sessions to remove, sorted.
	prune []string
	// lines is the diff, sorted by id: "+ id", "~ id field: old → new",
	// "- id".
	lines []string

	created, updated, unchanged int
	repaired                    int // of updated: malformed values replaced
	keptPaused                  int // paused sessions whose entry has no "paused": they stay paused
	notInFile                   int // sessions not in the file, kept (no --prune)
	malformedKept               int // malformed entries not in the file: never pruned
}

// planApply compares the entries of a file with the sessions and malformed
// entries read from Redis.
func planApply(entries []session.Entry, current []session.Session, malformed []session.Problem, prune bool) applyPlan {
	var p applyPlan
	have := make(map[string]session.Session, len(current))
	for _, s := range current {
		have[s.ID] = s
	}
	broken := make(map[string]error, len(malformed))
	for _, m := range malformed {
		broken[m.ID] = m.Err
	}
	type diff struct {
		id    string
		lines []string
	}
	var diffs []diff
	inFile := make(map[string]bool, len(entries))
	for _, e := range entries {
		want := e.Session
		inFile[want.ID] = true
		old, exists := have[want.ID]
		switch {
		case exists:
			if e.Paused == nil {
				want.Paused = old.Paused
				if old.Paused {
					p.keptPaused++
				}
			}
			lines := changedFields(old, want)
			if len(lines) == 0 {
				p.unchanged++
				continue
			}
			p.updated++
			p.write = append(p.write, want)
			diffs = append(diffs, diff{want.ID, lines})
		case broken[want.ID] != nil:
			p.updated++
			p.repaired++
			p.write = append(p.write, want)
			diffs = append(diffs, diff{want.ID, []string{fmt.Sprintf("~ %s: malformed value replaced (it had %s)", want.ID, malformedReason(broken[want.ID]))}})
		default:
			p.created++
			p.write = append(p.write, want)
			diffs = append(diffs, diff{want.ID, []string{"+ " + want.ID}})
		}
	}
	for _, s := range current {
		if inFile[s.ID] {
			continue
		}
		if !prune {
			p.notInFile++
			continue
		}
		p.prune = append(p.prune, s.ID)
		diffs = append(diffs, diff{s.ID, []string{"- " + s.ID}})
	}
	for _, m := range malformed {
		if !inFile[m.ID] {
			p.malformedKept++
		}
	}
	slices.SortFunc(p.write, func(a, b session.Session) int { return strings.Compare(a.ID, b.ID) })
	slices.Sort(p.prune)
	slices.SortStableFunc(diffs, func(a, b diff) int { return strings.Compare(a.id, b.id) })
	for _, d := range diffs {
		p.lines = append(p.lines, d.lines...)
	}
	return p
}

// changedFields is the diff of one session: a "~ id field: old → new" line
// per changed field, URLs redacted.
func changedFields(old, want session.Session) []string {
	var lines []string
	add := func(field, from, to string) {
		if from != to {
			lines = append(lines, fmt.Sprintf("~ %s %s: %s → %s", want.ID, field, from, to))
		}
	}
	add("url", redactURL(old.URL), redactURL(want.URL))
	if old.URL != want.URL && redactURL(old.URL) == redactURL(want.URL) {
		lines = append(lines, fmt.Sprintf("~ %s url: password changed", want.ID))
	}
	add("interval", durationOrDash(old.Interval), durationOrDash(want.Interval))
	scheduleChanges(old, want, add)
	add("labels", formatLabels(old.Labels), formatLabels(want.Labels))
	add("selector", dash(old.SelectorKey()), dash(want.SelectorKey()))
	add("method", old.MethodOrGet(), want.MethodOrGet())
	add("headers", formatHeaders(old.Headers), formatHeaders(want.Headers))
	if old.Body != want.Body {
		lines = append(lines, fmt.Sprintf("~ %s body: %d bytes → %d bytes", want.ID, len(old.Body), len(want.Body)))
	}
	add("expect", old.ExpectOrDefault(), want.ExpectOrDefault())
	add("profile", dash(old.Profile), dash(want.Profile))
	add("timeout", durationOrDash(old.Timeout), durationOrDash(want.Timeout))
	add("paused", strconv.FormatBool(old.Paused), strconv.FormatBool(want.Paused))
	return lines
}

// malformedReason is what is wrong with a malformed entry, without the
// package prefix.
func malformedReason(err error) string {
	s := err.Error()
	if _, reason, ok := strings.Cut(s, session.ErrMalformed.Error()+": "); ok {
		return reason
	}
	return s
}

// summary is the one line apply prints last.
func (p applyPlan) summary(dryRun bool) string {
	var b strings.Builder
	updated := strconv.Itoa(p.updated)
	if p.repaired > 0 {
		updated += fmt.Sprintf(" (%d malformed values replaced)", p.repaired)
	}
	if dryRun {
		fmt.Fprintf(&b, "dry run, nothing written: would create %d, update %s, prune %d; %d unchanged",
			p.created, updated, len(p.prune), p.unchanged)
	} else {
		fmt.Fprintf(&b, "created %d, updated %s, unchanged %d, pruned %d", p.created, updated, p.unchanged, len(p.prune))
	}
	if p.keptPaused > 0 {
		fmt.Fprintf(&b, `; %s kept paused (its entry does not say "paused"; "paused: false" resumes it)`, plural(p.keptPaused, "session"))
	}
	if p.notInFile > 0 {
		fmt.Fprintf(&b, "; %s not in the file kept (--prune removes them)", plural(p.notInFile, "session"))
	}
	if p.malformedKept > 0 {
		fmt.Fprintf(&b, "; %s not in the file kept (never pruned; see sessions list)", plural(p.malformedKept, "malformed entry"))
	}
	return b.String()
}

// plural is "1 session" or "2 sessions" ("entry" becomes "entries",
// "key" "keys").
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if s, ok := strings.CutSuffix(noun, "y"); ok && s != "" && !strings.ContainsRune("aeiou", rune(s[len(s)-1])) {
		return fmt.Sprintf("%d %sies", n, s)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func sessionsExportCommand() *cli.Command {
	return &cli.Command{
		Name:  "export",
		Usage: "print every session as a file that sessions apply reads (YAML or JSON)",
		Description: "Prints the sessions sorted by id, in the format of \"sessions apply\", so that\n" +
			"\"pollworker sessions export | pollworker sessions apply -f -\" changes nothing.\n" +
			"URLs are printed whole, passwords included: keep the output as you keep the\n" +
			"Redis credentials. \"paused: true\" is printed for paused sessions only.\n" +
			"Malformed entries are skipped and named on stderr (see sessions list); the\n" +
			"export then exits 1 after printing the rest, so that a backup script notices\n" +
			"it is incomplete, unless --allow-malformed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Usage: "yaml or json", Value: string(session.FormatYAML)},
			&cli.BoolFlag{Name: "allow-malformed", Usage: "exit 0 when malformed entries were skipped"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			format := session.FileFormat(cmd.String("format"))
			if format != session.FormatYAML && format != session.FormatJSON {
				return usageError(fmt.Errorf("sessions export: --format %.20q must be yaml or json", format))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				snap, err := a.store.Load(ctx)
				if err != nil {
					return fmt.Errorf("sessions export: %w", err)
				}
				if snap.BadRecord != nil { // the definitions are read all the same
					fmt.Fprintf(cmd.Root().ErrWriter, "pollworker: sessions export: %v\n", snap.BadRecord)
				}
				// The URL rule lives in Redis and goes with its data: a file
				// of non-http targets says how to restore it first.
				if rule, err := a.store.URLRule(ctx); err == nil && rule != session.URLRuleHTTP && format == session.FormatYAML {
					fmt.Fprintf(cmd.Root().Writer, "# url-rule: %s (a keyspace that lost its data needs \"pollworker sessions config --%s %s\" before \"sessions apply\" of this file)\n", rule, flagURLRule, rule)
				}
				if err := session.EncodeFile(cmd.Root().Writer, snap.Sessions, format); err != nil {
					return fmt.Errorf("sessions export: %w", err)
				}
				if n := len(snap.Malformed); n > 0 {
					ids := make([]string, 0, min(n, 10))
					for _, m := range snap.Malformed[:min(n, 10)] {
						ids = append(ids, printableID(m.ID))
					}
					if n > 10 {
						ids = append(ids, "...")
					}
					skipped := fmt.Sprintf("skipped %s (see sessions list): %s", plural(n, "malformed entry"), strings.Join(ids, ", "))
					if !cmd.Bool("allow-malformed") {
						return fmt.Errorf("sessions export: incomplete: %s; the rest was printed (--allow-malformed exits 0)", skipped)
					}
					fmt.Fprintf(cmd.Root().ErrWriter, "pollworker: sessions export: %s\n", skipped)
				}
				return nil
			})
		}),
	}
}
