package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/urfave/cli/v3"
	"go.yaml.in/yaml/v3"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// SyncLabel is the label that says which sync made a session: its value is
// the sync's --name. sessions sync changes and prunes only those.
const SyncLabel = "pollworker.sync"

// Bounds of sessions sync.
const (
	// syncFilePoll is how often --watch looks at the file's content.
	syncFilePoll = 250 * time.Millisecond
	// maxSDBytes bounds a discovery source.
	maxSDBytes = 64 << 20
)

const syncDescription = `Keeps the sessions a sync made equal to a service discovery source, the way Prometheus'
file and HTTP service discovery feed its scraper. The source is a Prometheus file_sd list,
JSON or YAML: [{"targets": ["host:port", ...], "labels": {"k": "v"}}, ...], from --file-sd
PATH or --http-sd URL (the same JSON over HTTP). Each target becomes the session NAME-TARGET
(bytes an id cannot hold replaced by _, with a hash of the target), polling the URL of
--url-template (a Go template over .Target and .Labels) every --interval, with --method,
--expect, --profile and --poll-timeout, and the group's labels (those not starting with __) plus the label
pollworker.sync=NAME. Only the sessions with that label are changed or pruned: sessions
added by hand, or by another sync, are never touched (a target whose id is taken by one is
skipped and reported). A target whose URL is invalid is skipped and reported, its session
kept as it was, and the sync exits 1 after writing the rest. A source that cannot be read,
that has no targets, or whose every target is skipped, changes nothing and says so
(--allow-empty lets an empty source prune every session of the sync).
--dry-run prints the plan. --watch keeps running: it re-syncs within a second of a change of
the file's content, every --refresh for --http-sd, and every --refresh anyway. See
docs/discovery.md.`

func sessionsSyncCommand() *cli.Command {
	return &cli.Command{
		Name:        "sync",
		Usage:       "keep the sessions of a sync equal to a Prometheus file_sd or http_sd source",
		UsageText:   "pollworker sessions sync (--file-sd PATH | --http-sd URL) --name NAME --url-template TEMPLATE [--interval D] [--method M] [--expect E] [--profile P] [--poll-timeout D] [--watch [--refresh D]] [--dry-run] [--allow-empty]",
		Description: syncDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "file-sd", Usage: "a Prometheus file_sd file, JSON or YAML"},
			&cli.StringFlag{Name: "http-sd", Usage: "a Prometheus http_sd URL (JSON)"},
			&cli.StringFlag{Name: "name", Usage: "the sync's name: the prefix of its session ids and the value of its pollworker.sync label"},
			&cli.StringFlag{Name: "url-template", Usage: "the URL of each session, a Go template over .Target and .Labels, e.g. http://{{.Target}}/health"},
			&cli.DurationFlag{Name: "interval", Value: 10 * time.Second, Usage: "the poll interval of every session"},
			&cli.StringFlag{Name: "method", Usage: "the HTTP method of every session (default GET)"},
			&cli.StringFlag{Name: "expect", Usage: "the statuses that count as success for every session (default 200-399)"},
			&cli.StringFlag{Name: "profile", Usage: "the worker-side profile of every session"},
			&cli.DurationFlag{Name: "poll-timeout", HideDefault: true, Usage: "how long a poll of every session waits for the response, at most --interval (default: the worker's --poll-timeout)"},
			&cli.BoolFlag{Name: "watch", Usage: "keep running and re-sync when the source changes"},
			&cli.DurationFlag{Name: "refresh", Value: 30 * time.Second, Usage: "with --watch, how often the source is read again regardless (http_sd: its refresh)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would change and write nothing"},
			&cli.BoolFlag{Name: "allow-empty", Usage: "let a source with no targets prune every session of the sync"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			sy, err := newSyncer(cmd)
			if err != nil {
				return usageError(fmt.Errorf("sessions sync: %w; nothing written", err))
			}
			return withAdminSteps(ctx, cmd, func(ctx context.Context, a admin) error {
				if !cmd.Bool("watch") {
					return sy.once(ctx, a)
				}
				return sy.watch(ctx, a, cmd.Duration("refresh"))
			})
		}),
	}
}

// syncer is one sessions sync: its source and the shape of its sessions.
type syncer struct {
	name, file, url string
	tmpl            *template.Template
	template        session.Session // Interval, Method, Expect, Profile, Timeout
	dryRun, empty   bool
	out, errOut     io.Writer
}

func newSyncer(cmd *cli.Command) (*syncer, error) {
	sy := &syncer{name: cmd.String("name"), file: cmd.String("file-sd"), url: cmd.String("http-sd"),
		dryRun: cmd.Bool("dry-run"), empty: cmd.Bool("allow-empty"), out: cmd.Root().Writer, errOut: cmd.Root().ErrWriter}
	switch {
	case (sy.file == "") == (sy.url == ""):
		return nil, errors.New("give one source: --file-sd PATH or --http-sd URL")
	case sy.name == "":
		return nil, errors.New("--name is required")
	case cmd.String("url-template") == "":
		return nil, errors.New("--url-template is required")
	case cmd.Bool("watch") && cmd.Duration("refresh") < time.Second:
		return nil, fmt.Errorf("--refresh (%v) must be at least 1s", cmd.Duration("refresh"))
	}
	if err := keyspace.ValidateID(sy.name); err != nil {
		return nil, fmt.Errorf("--name: %s", idProblem(err))
	}
	tmpl, err := template.New("url").Option("missingkey=zero").Parse(cmd.String("url-template"))
	if err != nil {
		return nil, fmt.Errorf("--url-template: %w", err)
	}
	// A field that does not exist ({{.Label.x}}) fails every target: an
	// error in the flag, found on an example before anything is read.
	if err := tmpl.Execute(io.Discard, urlTemplateData{"127.0.0.1:80", map[string]string{}}); err != nil {
		return nil, fmt.Errorf("--url-template: %w (it may use {{.Target}} and {{.Labels.NAME}})", err)
	}
	sy.tmpl = tmpl
	sy.template = session.Session{Interval: session.Duration(cmd.Duration("interval")), Method: strings.ToUpper(cmd.String("method")),
		Expect: cmd.String("expect"), Profile: cmd.String("profile"), Timeout: session.Duration(cmd.Duration("poll-timeout"))}
	// The shape must make a valid session: checked once on an example.
	probe := sy.template
	probe.ID, probe.URL = sy.name+"-probe", "http://probe.invalid/"
	if err := probe.Validate(); err != nil {
		return nil, fmt.Errorf("--interval, --method, --expect, --profile or --poll-timeout make no valid session: %w", err)
	}
	return sy, nil
}

// targetGroup is one entry of a Prometheus file_sd or http_sd list.
type targetGroup struct {
	Targets []string          `json:"targets" yaml:"targets"`
	Labels  map[string]string `json:"labels" yaml:"labels"`
}

// parseSD reads a file_sd or http_sd list, JSON or YAML (YAML reads both).
func parseSD(data []byte) ([]targetGroup, error) {
	var groups []targetGroup
	if err := yaml.Unmarshal(data, &groups); err != nil {
		return nil, fmt.Errorf("not a file_sd list: %w", err)
	}
	return groups, nil
}

// syncID is the id of the session of target in sync name: NAME-TARGET,
// or, when that is no valid id, the target's bytes an id cannot hold
// replaced by _ and the first 8 hex digits of its SHA-256 appended, so that
// two targets never share an id.
func syncID(name, target string) string {
	id := name + "-" + target
	if keyspace.ValidateID(id) == nil {
		return id
	}
	var b strings.Builder
	for i := 0; i < len(target) && b.Len() < 96; i++ {
		c := target[i]
		if keyspace.ValidateID(string(c)) == nil {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(target))
	return name + "-" + b.String() + "-" + hex.EncodeToString(sum[:4])
}

// sessionsOf are the sessions of groups, in order, the first of a
// duplicated target kept; skipped are the session ids of the targets
// skipped, and problems one line for each: one whose session is invalid,
// or whose URL checkURL (the keyspace's URL rule, nil for none) refuses.
func (sy *syncer) sessionsOf(groups []targetGroup, checkURL func(string) error) (out []session.Entry, skipped, problems []string) {
	seen := map[string]bool{}
	for _, g := range groups {
		for _, target := range g.Targets {
			if seen[target] {
				continue
			}
			seen[target] = true
			s := sy.template
			s.ID = syncID(sy.name, target)
			s.Labels = map[string]string{}
			for k, v := range g.Labels {
				if !strings.HasPrefix(k, "__") {
					s.Labels[k] = v
				}
			}
			s.Labels[SyncLabel] = sy.name
			var url bytes.Buffer
			if err := sy.tmpl.Execute(&url, urlTemplateData{target, g.Labels}); err != nil {
				skipped = append(skipped, s.ID)
				problems = append(problems, fmt.Sprintf("target %q skipped: --url-template: %v", target, err))
				continue
			}
			s.URL = url.String()
			err := s.Validate()
			if err == nil && checkURL != nil {
				err = checkURL(s.URL)
			}
			if err != nil {
				skipped = append(skipped, s.ID)
				problems = append(problems, fmt.Sprintf("target %q skipped: %v", target, err))
				continue
			}
			out = append(out, session.Entry{Session: s})
		}
	}
	return out, skipped, problems
}

// urlTemplateData is what --url-template sees of a target.
type urlTemplateData struct {
	Target string
	Labels map[string]string
}

// read reads the source.
func (sy *syncer) read(ctx context.Context, timeout time.Duration) ([]byte, error) {
	if sy.file != "" {
		f, err := os.Open(sy.file)
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		return io.ReadAll(io.LimitReader(f, maxSDBytes))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sy.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", sy.url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxSDBytes))
}

// source names the source in messages.
func (sy *syncer) source() string {
	if sy.file != "" {
		return sy.file
	}
	return sy.url
}

// errNothingChanged is returned when the source could not be used.
var errNothingChanged = errors.New("nothing changed")

// sync reads the source once and makes the sync's sessions equal to it.
func (sy *syncer) sync(ctx context.Context, a admin, data []byte, readErr error) error {
	if readErr != nil {
		return fmt.Errorf("sessions sync %s: %s unreadable (%v): %w", sy.name, sy.source(), readErr, errNothingChanged)
	}
	groups, err := parseSD(data)
	if err != nil {
		return fmt.Errorf("sessions sync %s: %s: %v: %w", sy.name, sy.source(), err, errNothingChanged)
	}
	rule, err := bounded(ctx, a, a.store.URLRule)
	if err != nil {
		return fmt.Errorf("sessions sync %s: nothing written: %w", sy.name, err)
	}
	entries, skipped, problems := sy.sessionsOf(groups, rule.Check())
	for _, p := range problems {
		fmt.Fprintf(sy.errOut, "pollworker: sessions sync %s: %s\n", sy.name, p)
	}
	if len(entries) == 0 && len(skipped) > 0 {
		return fmt.Errorf("sessions sync %s: every target of %s was skipped (%d): %w", sy.name, sy.source(), len(skipped), errNothingChanged)
	}
	if len(entries) == 0 && !sy.empty {
		return fmt.Errorf("sessions sync %s: %s has no targets (--allow-empty to prune every session of the sync): %w", sy.name, sy.source(), errNothingChanged)
	}
	snap, err := bounded(ctx, a, func(ctx context.Context) (session.Snapshot, error) { return a.store.Load(ctx) })
	if err != nil {
		return fmt.Errorf("sessions sync %s: nothing written: %w", sy.name, err)
	}
	var ours []session.Session
	taken := map[string]string{} // id -> why it is not ours
	kept := make(map[string]bool, len(skipped))
	for _, id := range skipped {
		kept[id] = true
	}
	for _, s := range snap.Sessions {
		if kept[s.ID] {
			continue // its target is in the source, but skipped: neither changed nor pruned
		}
		if s.Labels[SyncLabel] == sy.name {
			ours = append(ours, s)
		} else {
			taken[s.ID] = "a session not made by this sync"
		}
	}
	for _, m := range snap.Malformed {
		taken[m.ID] = "a malformed entry"
	}
	entries = slices.DeleteFunc(entries, func(e session.Entry) bool {
		if why, ok := taken[e.Session.ID]; ok {
			fmt.Fprintf(sy.errOut, "pollworker: sessions sync %s: %s skipped: the id is %s (never touched)\n", sy.name, e.Session.ID, why)
			return true
		}
		return false
	})
	p := planApply(entries, ours, nil, true)
	if sy.dryRun {
		for _, line := range p.lines {
			fmt.Fprintln(sy.out, line)
		}
		fmt.Fprintf(sy.out, "sessions sync %s: %s\n", sy.name, p.summary(true))
		return nil
	}
	if err := writePlan(ctx, a, p, "sessions sync "+sy.name); err != nil {
		return err
	}
	fmt.Fprintf(sy.out, "sessions sync %s: %s\n", sy.name, p.summary(false))
	if len(skipped) > 0 {
		return fmt.Errorf("sessions sync %s: %s skipped; their sessions, if any, were kept as they were", sy.name, plural(len(skipped), "target"))
	}
	return nil
}

// once syncs once: exit 1 when the source could not be used.
func (sy *syncer) once(ctx context.Context, a admin) error {
	data, err := sy.read(ctx, a.timeout)
	return sy.sync(ctx, a, data, err)
}

// watch syncs, then again whenever the file's content changes (looked at
// every syncFilePoll) and every refresh, until ctx ends. A failed sync is
// reported and retried at the next change or refresh.
func (sy *syncer) watch(ctx context.Context, a admin, refresh time.Duration) error {
	look := time.NewTicker(syncFilePoll)
	defer look.Stop()
	var last [sha256.Size]byte
	var synced time.Time
	for {
		data, err := sy.read(ctx, a.timeout)
		sum := sha256.Sum256(data)
		if err != nil { // the same error again is reported at the refresh
			sum = sha256.Sum256([]byte("error: " + err.Error()))
		}
		if sum != last || time.Since(synced) >= refresh {
			if serr := sy.sync(ctx, a, data, err); serr != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintf(sy.errOut, "pollworker: %v\n", serr)
			}
			last, synced = sum, time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-look.C:
		}
		if sy.url != "" { // http_sd: read again only at the refresh
			wait := time.Until(synced.Add(refresh))
			if wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
	}
}
