package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/httppoll"
)

// defaultTargetAddr is the default of target --addr.
const defaultTargetAddr = "127.0.0.1:18080"

func targetCommand() *cli.Command {
	return &cli.Command{
		Name:  "target",
		Usage: "serve a local HTTP target to poll while trying pollworker out (logs every poll)",
		Description: "Answers every request (any method) on a loopback address with --status and prints one line per request:\n" +
			"the time, the path, and the X-Poll-Session, X-Poll-Worker and X-Poll-Token headers the\n" +
			"workers send (and X-Poll-Slot for a scheduled session). As a downstream system should, it keeps the highest fencing token seen per\n" +
			"session and answers a lower one with 409 Conflict (\"stale token\"), and answers 409 to a request it reads after\n" +
			"its X-Poll-Deadline (\"past its deadline\": its worker had given up on it). For trying things out:\n\n" +
			"  pollworker target &\n" +
			"  pollworker sessions add --id api-1 --url http://127.0.0.1:18080/health --interval 5s\n\n" +
			"Runs until SIGTERM or SIGINT.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: defaultTargetAddr, Usage: "loopback host:port to listen on (port 0: any free port)"},
			&cli.IntFlag{Name: "status", Value: http.StatusOK, Usage: "HTTP status of every answer, from 200 to 599"},
			&cli.DurationFlag{Name: "delay", Usage: "hold every answer this long (a slow target), at most 1m"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			addr, status, delay := cmd.String("addr"), int(cmd.Int("status")), cmd.Duration("delay")
			if err := validateTarget(addr, status, delay); err != nil {
				return configError(err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return configError(fmt.Errorf("target: --addr %s: cannot listen: %w", addr, err))
			}
			w := cmd.Root().Writer
			fmt.Fprintf(w, "target listening on http://%s/ (answers %d; Ctrl-C to stop)\n", ln.Addr(), status)
			return serveTarget(ctx, ln, &pollTarget{out: w, status: status, delay: delay, now: time.Now})
		}),
	}
}

// validateTarget checks target's flags: a loopback host:port (the target
// is for trying things out on one machine), a status from 200 to 599, a
// delay from 0 to 1m.
func validateTarget(addr string, status int, delay time.Duration) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("target: --addr %q must be host:port", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("target: --addr %q must be on a loopback address (127.0.0.1, ::1 or localhost)", addr)
	}
	if status < 200 || status > 599 {
		return fmt.Errorf("target: --status (%d) must be from 200 to 599", status)
	}
	if delay < 0 || delay > time.Minute {
		return fmt.Errorf("target: --delay (%v) must be from 0 to 1m", delay)
	}
	return nil
}

// serveTarget serves h on ln until ctx is done.
func serveTarget(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("target: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("target: %w", err)
	}
	return nil
}

// pollTarget answers polls and prints one line for each.
type pollTarget struct {
	status int
	delay  time.Duration
	now    func() time.Time

	mu       sync.Mutex
	out      io.Writer        // guarded by mu
	maxToken map[string]int64 // guarded by mu: the highest token seen per session
}

// ServeHTTP answers one request and prints its line.
func (t *pollTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	session, worker := r.Header.Get(httppoll.HeaderSession), r.Header.Get(httppoll.HeaderWorker)
	rawToken := r.Header.Get(httppoll.HeaderToken)
	status, note := t.status, ""
	now := t.now()
	t.mu.Lock()
	if deadline, err := time.Parse(httppoll.DeadlineFormat, r.Header.Get(httppoll.HeaderDeadline)); err == nil && now.After(deadline) {
		// Read after its worker gave up on it: the session may be another's
		// by now, so it is refused like a stale token, and its token is not
		// remembered.
		status, note = http.StatusConflict, fmt.Sprintf(" past its deadline by %v", now.Sub(deadline).Round(time.Millisecond))
	} else if token, err := strconv.ParseInt(rawToken, 10, 64); err == nil && session != "" {
		if t.maxToken == nil {
			t.maxToken = map[string]int64{}
		}
		if seen, ok := t.maxToken[session]; ok && token < seen {
			status, note = http.StatusConflict, fmt.Sprintf(" stale token (highest seen %d)", seen)
		} else {
			t.maxToken[session] = token
		}
	}
	slot := "" // a scheduled session's slot (X-Poll-Slot), when sent
	if v := r.Header.Get(httppoll.HeaderSlot); v != "" {
		slot = " slot=" + printableID(v)
	}
	fmt.Fprintf(t.out, "%s %s %s session=%s worker=%s token=%s%s -> %d%s\n", now.UTC().Format("15:04:05.000"),
		r.Method, printableID(r.URL.Path), dash(printableID(session)), dash(printableID(worker)), dash(printableID(rawToken)), slot, status, note)
	t.mu.Unlock()
	if t.delay > 0 && status != http.StatusConflict {
		timer := time.NewTimer(t.delay)
		defer timer.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-timer.C:
		}
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status)+"\n")
}
