package main

import (
	"flag"
	"fmt"
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
	flagCluster       = "redis-cluster"
	flagSentinel      = "redis-sentinel-master"
	flagTLSCA         = "redis-tls-ca"
	flagTLSCert       = "redis-tls-cert"
	flagTLSKey        = "redis-tls-key"
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
		&cli.BoolFlag{
			Name:    flagCluster,
			Usage:   "Redis Cluster: --redis-url names one or more seed nodes (comma-separated URLs)",
			Sources: fromEnv(flagCluster),
		},
		&cli.StringFlag{
			Name:    flagSentinel,
			Usage:   "Redis Sentinel: the master name; --redis-url then names the sentinels (comma-separated URLs; user, password and db apply to the master)",
			Sources: fromEnv(flagSentinel),
		},
		&cli.StringFlag{Name: flagTLSCA, Usage: "PEM file of the CA that signed the Redis server certificate (implies TLS)", Sources: fromEnv(flagTLSCA)},
		&cli.StringFlag{Name: flagTLSCert, Usage: "PEM client certificate for TLS client authentication (with --redis-tls-key)", Sources: fromEnv(flagTLSCert)},
		&cli.StringFlag{Name: flagTLSKey, Usage: "PEM private key of --redis-tls-cert", Sources: fromEnv(flagTLSKey)},
		&cli.StringFlag{
			Name:    flagKeyPrefix,
			Usage:   "namespace of the worker keys (leases, fences, nodes, results): one fleet; a second fleet on the same Redis needs its own --session-prefix too",
			Value:   keyspace.DefaultPrefix,
			Sources: fromEnv(flagKeyPrefix),
		},
		&cli.StringFlag{
			Name:    flagSessionPrefix,
			Usage:   "namespace of the session definitions, of one --key-prefix (recorded at the first start, init or write: another key prefix's run and writes are refused); every worker under one --key-prefix must use the same (one that reads another is left out of placement by the others, and says so)",
			Value:   keyspace.DefaultSessionPrefix,
			Sources: fromEnv(flagSessionPrefix),
		},
	}
}

// adminFlags are connFlags plus the time limit of a one-shot command.
func adminFlags() []cli.Flag {
	return append(connFlags(), &cli.DurationFlag{
		Name:    flagTimeout,
		Usage:   "give up on Redis after this long (this command's own requests; a session's request timeout is sessions add --poll-timeout)",
		Value:   10 * time.Second,
		Sources: fromEnv(flagTimeout),
	})
}

// Bounds of status --watch: redrawing more often than minWatch only loads
// Redis (each refresh reads every session and lease).
const (
	minWatch = 100 * time.Millisecond
	maxWatch = 24 * time.Hour
)

// validateWatch checks a --watch period: 0 (print once) or from minWatch to
// maxWatch. withAdmin calls it for every command that has the flag.
func validateWatch(d time.Duration) error {
	if d != 0 && (d < minWatch || d > maxWatch) {
		return fmt.Errorf("--%s (%v) must be 0 (print once) or from %v to %v", flagWatch, d, minWatch, maxWatch)
	}
	return nil
}

// validateTimeout checks --timeout: positive and at most maxDuration.
func validateTimeout(d time.Duration) error {
	if d <= 0 || d > maxDuration {
		return fmt.Errorf("--%s (%v) must be positive and at most %v", flagTimeout, d, maxDuration)
	}
	return nil
}

// cliFlags registers the flags of a library's RegisterFlags (such as
// poller.Config's) as the CLI's, in their order, each with its
// environment variable and its default in words as the value's String
// at registration.
type cliFlags []cli.Flag

// Var registers value as the flag name.
func (f *cliFlags) Var(value flag.Value, name, usage string) {
	v, ok := value.(cli.Value)
	if !ok {
		v = stringGetter{value}
	}
	*f = append(*f, &cli.GenericFlag{Name: name, Usage: usage, Value: v, DefaultText: value.String(), Sources: fromEnv(name)})
}

// stringGetter makes a flag.Value a cli.Value: Get is String.
type stringGetter struct{ flag.Value }

// Get returns the value's String.
func (g stringGetter) Get() any { return g.String() }

// connOptionsFrom reads the connFlags of cmd.
func connOptionsFrom(cmd *cli.Command) connOptions {
	return connOptions{
		RedisURL:      cmd.String(flagRedisURL),
		Cluster:       cmd.Bool(flagCluster),
		Sentinel:      cmd.String(flagSentinel),
		TLSCA:         cmd.String(flagTLSCA),
		TLSCert:       cmd.String(flagTLSCert),
		TLSKey:        cmd.String(flagTLSKey),
		KeyPrefix:     cmd.String(flagKeyPrefix),
		SessionPrefix: cmd.String(flagSessionPrefix),
	}
}
