package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show live workers, sessions, leases per worker and balance",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: flagWatch, Usage: "redraw in place every this long until interrupted (0: print once)"}),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				once := func(ctx context.Context, w io.Writer) error {
					st, err := computeStatus(ctx, a.client, a.keys)
					if err != nil {
						return fmt.Errorf("status: %w", err)
					}
					if cmd.Bool("json") {
						enc := json.NewEncoder(w)
						enc.SetIndent("", "  ")
						return enc.Encode(st)
					}
					printStatus(w, st)
					return nil
				}
				w := cmd.Root().Writer
				every := cmd.Duration(flagWatch)
				if every <= 0 {
					return once(ctx, w)
				}
				return watch(ctx, w, every, a.timeout, once)
			})
		}),
	}
}

// printStatus formats st for people.
func printStatus(w io.Writer, st clusterStatus) {
	fmt.Fprintf(w, "live nodes: %d\n", len(st.Nodes))
	if len(st.Nodes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tHOST\tPID\tVERSION\tSTARTED\tEXPIRES IN\tLEASES")
		for _, n := range st.Nodes {
			started := "-"
			if !n.Started.IsZero() {
				started = n.Started.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%d\n", n.ID, dash(n.Host), dashInt(n.PID), dash(n.Version), started,
				shortDuration(time.Duration(n.ExpiresInMs)*time.Millisecond), n.Leases)
		}
		_ = tw.Flush()
	}
	s := st.Sessions
	fmt.Fprintf(w, "sessions: %d total, %d active, %d paused, %d malformed\n", s.Total, s.Active, s.Paused, s.Malformed)
	for _, m := range st.Malformed {
		fmt.Fprintf(w, "  malformed %s: %s\n", printableID(m.ID), m.Reason)
	}
	l := st.Leases
	fmt.Fprintf(w, "leases: %d of %d active sessions (%d by live nodes, %d by other holders)\n", l.Held, s.Active, l.ByLive, l.ByOthers)
	for _, h := range st.OtherHolders {
		fmt.Fprintf(w, "  %s (not live, leases expire by TTL): %d\n", h.ID, h.Leases)
	}
	fmt.Fprintf(w, "unowned active sessions: %d", l.Unowned)
	if l.Unowned > 0 {
		fmt.Fprintf(w, " (%s", strings.Join(st.UnownedSample, ", "))
		if more := l.Unowned - len(st.UnownedSample); more > 0 {
			fmt.Fprintf(w, ", and %d more", more)
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
	if len(st.Nodes) > 0 {
		fmt.Fprintf(w, "balance: %s\n", st.Balance)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dashInt(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// shortDuration formats d with at most millisecond precision.
func shortDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// flagWatch is status's refresh period.
const flagWatch = "watch"

// clearScreen moves the cursor home and erases the display (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watch calls draw every period until ctx is done, each call bounded by
// timeout, and redraws the screen in place with one write per frame, once
// draw has finished: the previous frame stays on screen while a refresh
// waits on Redis. A failed refresh shows its error with its time and since
// when refreshes fail, above the last successful frame and its time; the
// error stays until a refresh succeeds. Only ctx ends the watch.
func watch(ctx context.Context, w io.Writer, period, timeout time.Duration, draw func(context.Context, io.Writer) error) error {
	t := time.NewTicker(period)
	defer t.Stop()
	var good []byte      // the last successful frame's body
	var goodAt time.Time // when it was read
	var failSince time.Time
	for {
		var body, frame bytes.Buffer
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err := draw(rctx, &body)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now().UTC()
		frame.WriteString(clearScreen)
		fmt.Fprintf(&frame, "pollworker status, every %v (Ctrl-C to stop)   %s\n\n", period, now.Format(time.TimeOnly))
		if err == nil {
			good, goodAt, failSince = body.Bytes(), now, time.Time{}
			frame.Write(good)
		} else {
			if failSince.IsZero() {
				failSince = now
			}
			fmt.Fprintf(&frame, "ERROR at %s (failing since %s): %v\n", now.Format(time.TimeOnly), failSince.Format(time.TimeOnly), err)
			if good != nil {
				fmt.Fprintf(&frame, "\nlast successful refresh, at %s (%s ago):\n", goodAt.Format(time.TimeOnly), now.Sub(goodAt).Round(time.Second))
				frame.Write(good)
			}
		}
		_, _ = w.Write(frame.Bytes())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
