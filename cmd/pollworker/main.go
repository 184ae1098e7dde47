// Command pollworker runs pollworker workers and administers their sessions.
//
//	pollworker init       declare a new keyspace fresh, before its first worker starts
//	pollworker run        run a worker (many identical replicas share the sessions)
//	pollworker sessions   add, list, pause, resume and remove sessions
//	pollworker status     show live workers, sessions, leases and balance
//	pollworker explain    say who polls a session, who should, and why
//	pollworker check      verify the fleet's invariants (exit 3 when one is broken)
//	pollworker demo       watch 3 in-process workers share 30 sessions (no Redis needed)
//	pollworker target     serve a local HTTP target that logs every poll, to try things out
//	pollworker version    print the build version
//
// Every flag of run, sessions and status also reads the environment variable
// POLLWORKER_<FLAG NAME> (upper case, dashes as underscores). Exit status: 0
// on success, 1 when the work failed, 2 for invalid flags or configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/session"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the work failed: Redis unreachable, drain timed out, ...
	exitUsage   = 2 // invalid flags, arguments or configuration
)

// errInvalidConfig starts every configuration error, so that it reads
// "pollworker: invalid config: <rule>".
var errInvalidConfig = errors.New("invalid config")

func main() {
	// SIGHUP too (the terminal of a worker started by hand was closed, or
	// a service manager's reload): by default it would kill the process
	// without a drain, leaving its sessions unpolled until their leases
	// expire.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// The first signal starts the drain; a second one kills the process.
	context.AfterFunc(ctx, stop)
	// go-redis logs some failures (a pool that cannot dial) by itself, to
	// stderr, unstructured. The one-shot commands report their error in one
	// line, so drop those; run routes them into its logger.
	redis.SetLogger(redisLogger{zap.NewNop()})
	code := run(ctx, os.Args, os.Stdout, os.Stderr, func(l *zap.Logger) { redis.SetLogger(redisLogger{l}) })
	stop()
	os.Exit(code)
}

// run runs the command line args (args[0] is the program name) and returns
// the exit code. Errors are printed to stderr as one line. setRedisLogger,
// if not nil, is called by the run command with its logger, before any
// Redis client exists, to route go-redis's own log lines there (a process
// global: only main sets it).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, setRedisLogger func(*zap.Logger)) int {
	err := newApp(stdout, stderr, setRedisLogger).Run(ctx, args)
	if err == nil {
		return exitOK
	}
	msg := strings.ReplaceAll(err.Error(), "\n", "; ") // errors.Join's lines
	msg = envValueProblem.ReplaceAllString(msg, `invalid value $1 in environment variable $2 (--$3): $4`)
	fmt.Fprintf(stderr, "pollworker: %s\n", msg)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Errors that did not come from an action come from parsing flags or
	// their environment variables.
	return exitUsage
}

// envValueProblem matches urfave/cli's error for an environment variable
// whose value a flag refuses, which names the flag's Go type
// (`could not parse "0" as *poller.numberValue[int] value from …`).
var envValueProblem = regexp.MustCompile(`could not parse ("[^"]*") as \S+ value from environment variable "([A-Z0-9_]+)" for flag ([a-z0-9-]+): (.*)`)

// exitError carries the exit code of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as a mistake in the command line or configuration.
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// configError marks err, which names a violated rule, as a configuration
// error.
func configError(err error) error {
	if errors.Is(err, errInvalidConfig) {
		return usageError(err)
	}
	return usageError(fmt.Errorf("%w: %w", errInvalidConfig, err))
}

// action adapts an action so that its errors, unless already marked, exit
// with exitFailure; a session prefix that holds another key prefix's
// sessions (session.ErrNamespaceOwned: a write refused by the store) is
// a configuration error, exit 2.
func action(fn cli.ActionFunc) cli.ActionFunc {
	return func(ctx context.Context, cmd *cli.Command) error {
		err := fn(ctx, cmd)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		if errors.Is(err, session.ErrNamespaceOwned) {
			return configError(err)
		}
		return &exitError{code: exitFailure, err: err}
	}
}

// newApp builds the command tree, writing to stdout and stderr; see run for
// setRedisLogger.
func newApp(stdout, stderr io.Writer, setRedisLogger func(*zap.Logger)) *cli.Command {
	app := &cli.Command{
		Name:  "pollworker",
		Usage: "share polling sessions between identical worker replicas through Redis",
		Description: "Each session is polled on its interval by exactly one live worker at a time,\n" +
			"under a per-session lease with a fencing token. Start any number of \"pollworker run\"\n" +
			"replicas against the same Redis; manage sessions with \"pollworker sessions\".\n\n" +
			"Every flag of run, sessions and status can also be set through the environment\n" +
			"variable shown next to it. Exit status: 0 ok, 1 failure, 2 invalid flags or config.",
		Version:        versionString(),
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Commands: []*cli.Command{
			initCommand(),
			runCommand(setRedisLogger),
			sessionsCommand(),
			statusCommand(),
			resultsCommand(),
			explainCommand(),
			checkCommand(),
			demoCommand(),
			versionCommand(),
			drainCommand(),
			uncordonCommand(),
			forgetCommand(),
			targetCommand(),
		},
	}
	setUsageErrors(app)
	checkArgs(app)
	return app
}

// checkArgs makes every command in the tree of cmd refuse arguments it
// does not take, with exit code 2: a command with subcommands names an
// unknown one and lists the others (instead of urfave/cli's "No help
// topic"), and a command without ArgsUsage takes no arguments at all.
func checkArgs(cmd *cli.Command) {
	switch {
	case len(cmd.Commands) > 0 && cmd.Action == nil:
		cmd.Action = func(_ context.Context, c *cli.Command) error {
			if c.Args().Len() == 0 {
				if c.Root() == c {
					return cli.ShowRootCommandHelp(c)
				}
				return cli.ShowSubcommandHelp(c)
			}
			var names []string
			for _, sub := range c.VisibleCommands() {
				if sub.Name != "help" {
					names = append(names, sub.Name)
				}
			}
			return usageError(fmt.Errorf("%sunknown command %q (commands: %s; see %s --help)",
				pathPrefix(c), c.Args().First(), strings.Join(names, ", "), c.FullName()))
		}
	case cmd.Action != nil && cmd.ArgsUsage == "":
		act := cmd.Action
		cmd.Action = func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return usageError(fmt.Errorf("%stakes no arguments, got %q (see %s --help)", pathPrefix(c), c.Args().First(), c.FullName()))
			}
			return act(ctx, c)
		}
	}
	for _, c := range cmd.Commands {
		checkArgs(c)
	}
}

// pathPrefix is "sessions list: " for the command pollworker sessions list,
// "" for the root.
func pathPrefix(cmd *cli.Command) string {
	if path := cmd.Path(); len(path) > 1 {
		return strings.Join(path[1:], " ") + ": "
	}
	return ""
}

// setUsageErrors makes every command report flag errors as one line with
// exit code 2, instead of printing its whole help.
func setUsageErrors(cmd *cli.Command) {
	cmd.OnUsageError = func(_ context.Context, cmd *cli.Command, err error, _ bool) error {
		if path := cmd.Path(); len(path) > 1 {
			err = fmt.Errorf("%s: %w", strings.Join(path[1:], " "), err)
		}
		return usageError(fmt.Errorf("%w (see %s --help)", err, cmd.FullName()))
	}
	for _, c := range cmd.Commands {
		setUsageErrors(c)
	}
}
