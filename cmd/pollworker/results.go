package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
)

// resultsCommand reads the results streams: the recent ones, then with
// --follow the new ones as they come.
func resultsCommand() *cli.Command {
	return &cli.Command{
		Name:      "results",
		Usage:     "show recorded poll results, merged from every results stream in order of poll start",
		UsageText: "pollworker results [--follow] [--session ID] [--changed] [--since DURATION] [--limit N] [--json]",
		Description: "Reads <key-prefix>:results and the 16 streams of a Cluster (<key-prefix>:results:<i>:{tag}),\n" +
			"keeps the --limit most recently recorded results (of --session only, and of the last --since\n" +
			"by the Redis clock, if given) and prints them in order of poll start, one per line.\n" +
			"--follow then prints new results as they are recorded, until interrupted (XREAD BLOCK),\n" +
			"each batch in order of poll start. The streams are capped (run --record-maxlen): what is\n" +
			"older than their retention is gone.\n" +
			"--changed keeps only the results whose response changed (another status, error class, ETag\n" +
			"or body than the session's previous poll, whichever worker made it) and prints them as JSON\n" +
			"lines, for a consumer: pollworker results --follow --changed prints one line per change.\n" +
			"A JSON line has at, session, worker, token, status, latency_ms, error, changed, body_sha256,\n" +
			"body (with run --record-body), stream and id. See docs/results.md.",
		Flags: append(adminFlags(),
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "after the recent results, print new ones until interrupted"},
			&cli.StringFlag{Name: "session", Usage: "only this session's results"},
			&cli.BoolFlag{Name: "changed", Usage: "only the results whose response changed, as JSON lines"},
			&cli.DurationFlag{Name: "since", Usage: "only results recorded in the last DURATION (0: as far back as the streams go)"},
			&cli.IntFlag{Name: "limit", Value: results.DefaultReadLimit, Usage: fmt.Sprintf("print at most this many recent results first (1 to %d)", results.MaxReadLimit)},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per line"},
		),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			q := results.Query{Session: cmd.String("session"), Changed: cmd.Bool("changed"), Since: cmd.Duration("since"), Limit: int(cmd.Int("limit"))}
			if err := validateResultsQuery(q); err != nil {
				return configError(err)
			}
			show := printResult
			if cmd.Bool("json") || q.Changed {
				show = printResultJSON
			}
			return withAdminSteps(ctx, cmd, func(ctx context.Context, a admin) error {
				r, err := results.NewReader(a.client, a.keys)
				if err != nil {
					return configError(err)
				}
				w := cmd.Root().Writer
				rctx, cancel := context.WithTimeout(ctx, a.timeout)
				entries, cur, err := r.Read(rctx, q)
				cancel()
				if err != nil {
					return fmt.Errorf("results: %w", err)
				}
				if len(entries) == 0 && q.Session != "" {
					if err := sessionExists(ctx, a, q.Session); err != nil {
						return fmt.Errorf("results: %w", err)
					}
				}
				for _, e := range entries {
					show(w, e)
				}
				if !cmd.Bool("follow") {
					return nil
				}
				err = r.Follow(ctx, q, cur, func(es []results.Entry) error {
					for _, e := range es {
						show(w, e)
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("results: %w", err)
				}
				return nil
			})
		}),
	}
}

// sessionExists returns an error saying "no such session" when session id
// is not stored (a malformed definition exists), nil when it is, or the
// error of the read. results asks it only when no result of id is left:
// a removed session's results are still shown.
func sessionExists(ctx context.Context, a admin, id string) error {
	_, err := bounded(ctx, a, func(ctx context.Context) (session.Session, error) { return a.store.Get(ctx, id) })
	switch {
	case errors.Is(err, session.ErrNotFound):
		return fmt.Errorf("no such session %s, and no results recorded for it (sessions list shows the sessions)", id)
	case err == nil, errors.Is(err, session.ErrMalformed):
		return nil
	}
	return err
}

// validateResultsQuery checks the flags of results, naming the rule.
func validateResultsQuery(q results.Query) error {
	switch {
	case q.Limit < 1 || q.Limit > results.MaxReadLimit:
		return fmt.Errorf("--limit (%d) must be from 1 to %d", q.Limit, results.MaxReadLimit)
	case q.Since < 0 || q.Since > 366*24*time.Hour:
		return fmt.Errorf("--since (%v) must be from 0 to 8784h (366 days)", q.Since)
	case q.Session != "":
		if err := keyspace.ValidateID(q.Session); err != nil {
			return fmt.Errorf("--session: %s", idProblem(err))
		}
	}
	return nil
}

// printResult writes e as one line: time, session, worker, token, status,
// latency, error, and "changed" with the start of the content hash when the
// response changed.
func printResult(w io.Writer, e results.Entry) {
	line := fmt.Sprintf("%s session=%s worker=%s token=%d status=%d latency=%s",
		e.At.UTC().Format("2006-01-02T15:04:05.000Z"), e.Session, e.Worker, e.Token, e.Status, e.Latency)
	if e.Error != "" {
		line += " error=" + strconv.Quote(e.Error)
	}
	if e.Changed {
		line += " changed"
		if e.BodySHA256 != "" {
			line += " body_sha256=" + e.BodySHA256[:min(12, len(e.BodySHA256))]
		}
	}
	fmt.Fprintln(w, line)
}

// resultJSON is the JSON form of one result.
type resultJSON struct {
	At        time.Time `json:"at"`
	Session   string    `json:"session"`
	Worker    string    `json:"worker"`
	Token     int64     `json:"token"`
	Status    int       `json:"status"`
	LatencyMs float64   `json:"latency_ms"`
	Error     string    `json:"error,omitempty"`
	Changed   bool      `json:"changed"`
	BodySHA   string    `json:"body_sha256,omitempty"`
	Body      string    `json:"body,omitempty"`
	Stream    string    `json:"stream"`
	ID        string    `json:"id"`
}

// printResultJSON writes e as one JSON object on one line.
func printResultJSON(w io.Writer, e results.Entry) {
	b, _ := json.Marshal(resultJSON{At: e.At.UTC(), Session: e.Session, Worker: e.Worker, Token: e.Token, Status: e.Status,
		LatencyMs: float64(e.Latency) / float64(time.Millisecond), Error: e.Error, Changed: e.Changed, BodySHA: e.BodySHA256,
		Body: e.Body, Stream: e.Stream, ID: e.ID})
	fmt.Fprintf(w, "%s\n", b)
}
