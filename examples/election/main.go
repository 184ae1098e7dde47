// Command election shows leader election with package election: three
// candidates in one process elect a leader, the leader resigns and hands
// over, then transfers leadership to a named candidate, and a cron-style job
// runs once among the three. It exits by itself after a few seconds;
// Ctrl-C stops it early, cleanly (the leader resigns).
//
//	go run ./examples/election                              # its own embedded Redis (miniredis)
//	go run ./examples/election --redis 127.0.0.1:6379       # an address,
//	go run ./examples/election --redis redis://:pw@host:6379/0  # or a redis:// or rediss:// URL
//
// It also runs against the embedded Redis of `pollworker demo`, next to the
// demo's workers: start the demo in one terminal, with a longer run,
//
//	go run ./cmd/pollworker demo --duration 2m
//
// and, in a second terminal, the command the demo prints at its start:
//
//	go run ./examples/election --redis 127.0.0.1:PORT
//
// The example's keys (poll:lease:{election:example-leader}, its fencing
// counter and candidate keys) sit beside the demo's and do not disturb it;
// fencing tokens keep increasing from one run of the example to the next.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/election"
)

func main() {
	var addr string
	const usage = "Redis to use: host:port or a redis:// or rediss:// URL; empty starts an embedded miniredis on 127.0.0.1"
	flag.StringVar(&addr, "redis", "", usage)
	flag.StringVar(&addr, "redis-url", "", "same as --redis")
	flag.Parse()
	redisURL, err := normalizeRedis(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "election example:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "election example:", err)
		os.Exit(1)
	}
}

// normalizeRedis turns the --redis value into a URL: a bare host:port
// becomes redis://host:port; a URL is kept; empty stays empty (embedded).
func normalizeRedis(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.Contains(s, "://") {
		return s, nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return "", fmt.Errorf("--redis %q: want host:port or a redis:// URL", s)
	}
	return "redis://" + s, nil
}

// Timings of the example: short so that it finishes in seconds.
const (
	role    = "example-leader"
	ttl     = 2 * time.Second
	renew   = 300 * time.Millisecond
	retry   = 100 * time.Millisecond
	waitFor = 10 * time.Second
)

// run runs the whole example, printing to out. When ctx is done first
// (Ctrl-C) it stops the candidates, the leader releasing its lease, and
// returns nil.
func run(ctx context.Context, out io.Writer, redisURL string) error {
	p := &printer{out: out, start: time.Now()}

	if redisURL == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("start embedded redis: %w", err)
		}
		defer mr.Close()
		mr.ClockTTL(true) // TTLs run on the wall clock, as in Redis
		redisURL = "redis://" + mr.Addr()
		p.printf("embedded Redis (miniredis) on %s", mr.Addr())
	} else {
		p.printf("Redis at %s", redact(redisURL))
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	opt.ContextTimeoutEnabled = true // let the electors' per-request deadlines apply
	client := redis.NewClient(opt)
	defer func() { _ = client.Close() }()
	pingCtx, cancelPing := context.WithTimeout(ctx, 2*time.Second)
	err = client.Ping(pingCtx).Err()
	cancelPing()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("cannot reach Redis at %s (is the demo still running?): %w", redact(redisURL), err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel below: every elector has stopped
	defer cancel()
	var electors []*election.Elector
	for _, id := range []string{"alpha", "bravo", "charlie"} {
		e, err := election.New(election.Config{
			Client: client, Role: role, ID: id,
			TTL: ttl, RenewInterval: renew, RetryInterval: retry,
			OnElected: func(ctx context.Context, token int64) {
				p.printf("%s: elected, fencing token %d", id, token)
				<-ctx.Done() // the leader's work would run here, under ctx
			},
			OnDemoted: func() { p.printf("%s: demoted", id) },
		})
		if err != nil {
			return err
		}
		electors = append(electors, e)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = e.Run(runCtx)
		}()
	}

	err = scenario(ctx, p, client, electors)
	cancel()
	wg.Wait()
	if ctx.Err() != nil { // interrupted: whatever failed, failed for that
		p.printf("interrupted; stopped")
		return nil
	}
	if err != nil {
		return err
	}
	p.printf("stopped")
	return nil
}

// scenario elects, resigns, transfers and runs a cron-style job.
func scenario(ctx context.Context, p *printer, client *redis.Client, electors []*election.Elector) error {
	first, err := waitLeader(ctx, electors, nil)
	if err != nil {
		return err
	}
	id, err := first.Leader(ctx)
	if err != nil {
		return err
	}
	p.printf("leader: %s (Redis says %s), token %d", first.ID(), id, first.Token())

	p.printf("%s resigns", first.ID())
	began := time.Now()
	if err := first.Resign(ctx); err != nil {
		return fmt.Errorf("resign: %w", err)
	}
	second, err := waitLeader(ctx, electors, first)
	if err != nil {
		return err
	}
	p.printf("handover: %s -> %s in %v, token %d", first.ID(), second.ID(), time.Since(began).Round(time.Millisecond), second.Token())

	target := first
	p.printf("%s transfers leadership to %s", second.ID(), target.ID())
	if err := second.TransferTo(ctx, target.ID()); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	third, err := waitLeader(ctx, electors, second)
	if err != nil {
		return err
	}
	p.printf("leader: %s, token %d", third.ID(), third.Token())

	// A cron-style job: every replica tries, one runs.
	var runs atomic.Int32
	var jobs sync.WaitGroup
	for _, e := range electors {
		jobs.Add(1)
		go func() {
			defer jobs.Done()
			ran, err := election.RunOnce(ctx, election.Config{
				Client: client, Role: "example-cron", ID: e.ID(),
				TTL: ttl, RenewInterval: renew, RetryInterval: retry,
			}, func(ctx context.Context, token int64) error {
				runs.Add(1)
				p.printf("%s: runs the nightly job, token %d", e.ID(), token)
				select {
				case <-time.After(200 * time.Millisecond): // the job
				case <-ctx.Done():
				}
				return nil
			})
			if err == nil && !ran {
				p.printf("%s: job already taken", e.ID())
			}
		}()
	}
	jobs.Wait()
	p.printf("nightly job ran %d time(s) among %d replicas", runs.Load(), len(electors))
	return nil
}

// waitLeader waits until exactly one elector other than not leads.
func waitLeader(parent context.Context, es []*election.Elector, not *election.Elector) (*election.Elector, error) {
	ctx, cancel := context.WithTimeout(parent, waitFor)
	defer cancel()
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for {
		var leader *election.Elector
		n := 0
		for _, e := range es {
			if e.IsLeader() {
				leader = e
				n++
			}
		}
		if n == 1 && leader != not {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return nil, parent.Err()
			}
			return nil, errors.New("no new leader in time")
		case <-ticker.C:
		}
	}
}

// printer writes timestamped lines from many goroutines.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%6.3fs  %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// redact hides the password of a Redis URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
