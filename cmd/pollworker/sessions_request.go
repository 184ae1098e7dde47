package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// maxBodyFileBytes bounds --body-file: a session's encoded value is at
// most session.MaxValueBytes.
const maxBodyFileBytes = 32 << 10

// requestFlags are the flags of sessions add that say how the HTTP poller
// asks (issue 24 item 1).
func requestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "method", Usage: "HTTP method: " + strings.Join(session.Methods, ", "), Value: "GET"},
		&cli.StringSliceFlag{Name: "header", Usage: "'Name: value' sent with every request, for values that are not secret (stored in Redis; credentials go in a worker-side --profile); repeat for several"},
		&cli.StringFlag{Name: "body", Usage: "request body (POST, PUT, PATCH, DELETE); its Content-Type comes from --header"},
		&cli.StringFlag{Name: "body-file", Usage: "read the request body from this file, now (at most 32 KiB)"},
		&cli.StringFlag{Name: "expect", Usage: "statuses that count as success, codes and ranges like 200-299,304; any other is a failure", Value: session.DefaultExpect},
		&cli.StringFlag{Name: "profile", Usage: "name of a worker-side profile (pollworker run --profiles) holding credentials and TLS settings"},
		&cli.DurationFlag{Name: "poll-timeout", HideDefault: true, Usage: "how long a poll of this session waits for the response before it fails as a timeout, from 10ms to 5m and at most --interval (unset or 0: the worker's pollworker run --poll-timeout, 10s by default)"},
	}
}

// requestFromFlags fills in the request fields of s from cmd's flags; its
// errors are usage errors (one line naming the rule).
func requestFromFlags(cmd *cli.Command, s *session.Session) error {
	s.Method = strings.ToUpper(strings.TrimSpace(cmd.String("method")))
	if s.Method == "GET" {
		s.Method = "" // the default: stored sessions stay as they were
	}
	headers, err := parseHeaders(cmd.StringSlice("header"))
	if err != nil {
		return err
	}
	s.Headers = headers
	s.Body = cmd.String("body")
	if f := cmd.String("body-file"); f != "" {
		if s.Body != "" {
			return errors.New("give --body or --body-file, not both")
		}
		b, err := readBodyFile(f)
		if err != nil {
			return err
		}
		s.Body = b
	}
	expect, err := session.CanonicalExpect(cmd.String("expect"))
	if err != nil {
		return fmt.Errorf("--expect: %w", err)
	}
	if expect == session.DefaultExpect {
		expect = ""
	}
	s.Expect = expect
	s.Profile = strings.TrimSpace(cmd.String("profile"))
	s.Timeout = session.Duration(cmd.Duration("poll-timeout"))
	return nil
}

// readBodyFile reads --body-file, at most maxBodyFileBytes.
func readBodyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--body-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxBodyFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("--body-file: %w", err)
	}
	if len(b) > maxBodyFileBytes {
		return "", fmt.Errorf("--body-file %s is longer than %d bytes", path, maxBodyFileBytes)
	}
	return string(b), nil
}

// parseHeaders turns 'Name: value' pairs into a map; names must be
// distinct (case-insensitively).
func parseHeaders(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	headers := make(map[string]string, len(pairs))
	seen := map[string]bool{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--header %.60q must be 'Name: value'", p)
		}
		if seen[strings.ToLower(name)] {
			return nil, fmt.Errorf("--header %s given twice", name)
		}
		seen[strings.ToLower(name)] = true
		headers[name] = strings.TrimSpace(value)
	}
	return headers, nil
}

// formatHeaders prints headers as "Name: value; Name: value", sorted; "-"
// for none.
func formatHeaders(headers map[string]string) string { return formatPairs(headers, ": ", "; ") }

// failingRow is a failing session as sessions list --failing prints it.
type failingRow struct {
	ID       string    `json:"id"`
	Status   int       `json:"status"`
	Class    string    `json:"class"`
	Message  string    `json:"message"`
	Failures int       `json:"failures"`
	Since    time.Time `json:"since"`
	Polled   time.Time `json:"polled"`
	Worker   string    `json:"worker"`
	now      time.Time
}

// failingOf are the sessions whose saved state says their last poll
// failed, those failing longest first. The state is what every worker
// saves after each failed poll (fenced by its lease), so this is the
// whole fleet's view, not one worker's memory.
func failingOf(sessions []session.Session, states map[string]*stateView) []failingRow {
	var out []failingRow
	for _, s := range sessions {
		v := states[s.ID]
		if v == nil || v.HTTP == nil || v.HTTP.Failures == 0 {
			continue
		}
		h := v.HTTP
		out = append(out, failingRow{ID: s.ID, Status: h.Status, Class: h.Error, Message: h.Message,
			Failures: h.Failures, Since: h.FailingSince, Polled: h.Polled, Worker: h.Worker, now: v.now})
	}
	slices.SortStableFunc(out, func(a, b failingRow) int { return a.Since.Compare(b.Since) })
	return out
}

// printFailing prints the rows of sessions list --failing.
func printFailing(w io.Writer, asJSON bool, rows []failingRow) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []failingRow{}
		}
		return enc.Encode(struct {
			Failing []failingRow `json:"failing"`
		}{rows})
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "no failing sessions: every session's last saved poll succeeded")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAST STATUS\tFAILURES\tFAILING SINCE\tLAST POLL\tBY\tMESSAGE")
	for _, r := range rows {
		status := r.Class
		if r.Status != 0 {
			status = strconv.Itoa(r.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, status, r.Failures,
			r.Since.UTC().Format(time.RFC3339)+" ("+ago(r.Since, r.now)+")", ago(r.Polled, r.now), r.Worker, dash(r.Message))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d failing sessions\n", len(rows))
	return nil
}

// printLastPoll adds to explain what the session's saved state says of
// its last poll when it failed: a session not polled for want of its
// profile, a target answering 401, ... (nothing when it succeeded or no
// state was saved; a failed read is said).
func printLastPoll(ctx context.Context, a admin, w io.Writer, id string) {
	rec, err := state.NewStore(a.client, a.keys).Load(ctx, id)
	if err != nil {
		fmt.Fprintf(w, "last poll:  could not read the saved state: %v\n", err)
		return
	}
	v := newStateView(rec)
	if v == nil || v.HTTP == nil || v.HTTP.Failures == 0 {
		return
	}
	h := v.HTTP
	fmt.Fprintf(w, "last poll:  failed (%s), %d in a row since %s, by %s: %s\n",
		outcomeText(h), h.Failures, stamp(h.FailingSince, v.now), h.Worker, dash(h.Message))
}
