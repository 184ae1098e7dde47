package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/keyspace"
)

// Names of the flags shared by several commands.
const (
	flagRedisURL      = "redis-url"
	flagKeyPrefix     = "key-prefix"
	flagSessionPrefix = "session-prefix"
	flagTimeout       = "timeout"
)

// defaultRedisURL is the default of --redis-url.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// envVar is the environment variable of a flag: POLLWORKER_<NAME>, upper
// case, dashes as underscores.
func envVar(flag string) string {
	return "POLLWORKER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// fromEnv is the value source of a flag: its environment variable.
func fromEnv(flag string) cli.ValueSourceChain { return cli.EnvVars(envVar(flag)) }

// connFlags are the flags that say where the deployment lives: the Redis
// URL and the two key prefixes. Every command that talks to Redis has them;
// each call returns new flag values.
func connFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    flagRedisURL,
			Usage:   "Redis to use: redis://[user:password@]host:port/db or rediss:// for TLS (the password is never logged)",
			Value:   defaultRedisURL,
			Sources: fromEnv(flagRedisURL),
		},
		&cli.StringFlag{
			Name:    flagKeyPrefix,
			Usage:   "namespace of the worker keys (leases, fences, nodes, results)",
			Value:   keyspace.DefaultPrefix,
			Sources: fromEnv(flagKeyPrefix),
		},
		&cli.StringFlag{
			Name:    flagSessionPrefix,
			Usage:   "namespace of the session definitions",
			Value:   keyspace.DefaultSessionPrefix,
			Sources: fromEnv(flagSessionPrefix),
		},
	}
}

// adminFlags are connFlags plus the time limit of a one-shot command.
func adminFlags() []cli.Flag {
	return append(connFlags(), &cli.DurationFlag{
		Name:    flagTimeout,
		Usage:   "give up on Redis after this long",
		Value:   10 * time.Second,
		Sources: fromEnv(flagTimeout),
	})
}

// connOptionsFrom reads the connFlags of cmd.
func connOptionsFrom(cmd *cli.Command) connOptions {
	return connOptions{
		RedisURL:      cmd.String(flagRedisURL),
		KeyPrefix:     cmd.String(flagKeyPrefix),
		SessionPrefix: cmd.String(flagSessionPrefix),
	}
}
