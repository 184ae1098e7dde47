package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zapcore"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
)

// Lower bounds of the run command's durations.
const (
	minDuration = time.Millisecond      // every duration: Redis TTLs count milliseconds
	maxDuration = 24 * time.Hour        // every duration: keeps derived ones (3 × heartbeat) from overflowing
	minLeaseTTL = 10 * time.Millisecond // lease.New's minimum
)

// connOptions are the values of connFlags, as given.
type connOptions struct {
	RedisURL      string
	Cluster       bool
	Sentinel      string
	TLSCA         string
	TLSCert       string
	TLSKey        string
	KeyPrefix     string
	SessionPrefix string
}

// connConfig is a validated connOptions.
type connConfig struct {
	// Redis are the client options parsed from the (first) URL.
	Redis *redis.Options
	// Addrs are the host:port of every URL given (seeds or sentinels).
	Addrs []string
	// Cluster and Sentinel select the kind of client (see newClient).
	Cluster  bool
	Sentinel string
	// RedisURL is the URL with its password replaced by "xxxxx", for logs
	// (the user name too when the URL gives no password: see userOnly).
	RedisURL string
	// UserOnly: a URL gives a user name and no password, which is often a
	// password in the wrong place (see authError).
	UserOnly bool
	// Keys are the validated prefixes.
	Keys keyspace.Space
}

// parseConn validates o. It does not touch the network.
func parseConn(o connOptions) (connConfig, error) {
	var cfg connConfig
	var redacted []string
	for _, raw := range strings.Split(o.RedisURL, ",") {
		opts, r, err := parseRedisURL(strings.TrimSpace(raw))
		if err != nil {
			return connConfig{}, err
		}
		cfg.UserOnly = cfg.UserOnly || (opts.Username != "" && opts.Password == "")
		if cfg.Redis == nil {
			// Honour context deadlines on the socket: the coordinator bounds
			// every round trip (a renewal answered after its lease's
			// deadline is useless), which go-redis ignores otherwise.
			opts.ContextTimeoutEnabled = true
			cfg.Redis = opts
		}
		cfg.Addrs = append(cfg.Addrs, opts.Addr)
		redacted = append(redacted, r)
	}
	cfg.RedisURL = strings.Join(redacted, ",")
	cfg.Cluster, cfg.Sentinel = o.Cluster, o.Sentinel
	switch {
	case o.Cluster && o.Sentinel != "":
		return connConfig{}, fmt.Errorf("%w: --%s and --%s exclude each other", errInvalidConfig, flagCluster, flagSentinel)
	case len(cfg.Addrs) > 1 && !o.Cluster && o.Sentinel == "":
		return connConfig{}, fmt.Errorf("%w: --%s lists %d URLs: add --%s or --%s", errInvalidConfig, flagRedisURL, len(cfg.Addrs), flagCluster, flagSentinel)
	case o.Cluster && cfg.Redis.DB != 0:
		return connConfig{}, fmt.Errorf("%w: --%s: Redis Cluster has only database 0, got %d", errInvalidConfig, flagRedisURL, cfg.Redis.DB)
	}
	if err := applyTLS(cfg.Redis, o); err != nil {
		return connConfig{}, err
	}
	keys, err := parseKeys(o.KeyPrefix, o.SessionPrefix)
	if err != nil {
		return connConfig{}, err
	}
	cfg.Keys = keys
	return cfg, nil
}

// applyTLS loads the CA and client certificate files into opts.TLSConfig.
func applyTLS(opts *redis.Options, o connOptions) error {
	if o.TLSCA == "" && o.TLSCert == "" && o.TLSKey == "" {
		return nil
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return fmt.Errorf("%w: --%s and --%s go together", errInvalidConfig, flagTLSCert, flagTLSKey)
	}
	if opts.TLSConfig == nil {
		host, _, err := net.SplitHostPort(opts.Addr)
		if err != nil {
			host = opts.Addr
		}
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return fmt.Errorf("%w: --%s: %w", errInvalidConfig, flagTLSCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: --%s: no PEM certificate in %s", errInvalidConfig, flagTLSCA, o.TLSCA)
		}
		opts.TLSConfig.RootCAs = pool
	}
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return fmt.Errorf("%w: --%s/--%s: %w", errInvalidConfig, flagTLSCert, flagTLSKey, err)
		}
		opts.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// newClient connects (lazily) as the flags say: a Sentinel-managed master,
// a Cluster, or one server. Every kind is a redis.UniversalClient.
func (c connConfig) newClient() redis.UniversalClient {
	return c.newClientNamed(c.Redis.ClientName, 0)
}

// newClientNamed is newClient with another client name and, if positive,
// a pool of poolSize connections (per master) instead of go-redis's
// default.
func (c connConfig) newClientNamed(name string, poolSize int) redis.UniversalClient {
	o := c.Redis
	switch {
	case c.Sentinel != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.Sentinel, SentinelAddrs: c.Addrs,
			Username: o.Username, Password: o.Password, DB: o.DB,
			ClientName: name, TLSConfig: o.TLSConfig,
			ContextTimeoutEnabled: true, PoolSize: poolSize,
			PipelineReadBufferSize: pipelineBufferSize, PipelineWriteBufferSize: pipelineBufferSize,
		})
	case c.Cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.Addrs, Username: o.Username, Password: o.Password,
			ClientName: name, TLSConfig: o.TLSConfig,
			ContextTimeoutEnabled: true, PoolSize: poolSize,
			// go-redis reloads the slot map on MOVED and every 60 s by
			// default, not when a master stops answering: after a kill -9
			// and its replica's promotion the slots stayed on the dead
			// address for 40-60 s (every session of them unpolled).
			ClusterStateReloadInterval: clusterReload,
		})
	}
	ro := *o
	ro.ClientName = name
	if poolSize > 0 {
		ro.PoolSize = poolSize
	}
	ro.PipelineReadBufferSize, ro.PipelineWriteBufferSize = pipelineBufferSize, pipelineBufferSize
	return redis.NewClient(&ro)
}

// clusterReload is how often a Cluster client reloads its slot map when
// it is used: a CLUSTER SLOTS every 2 s per client, so that a failover's
// new master is found within about that (the worker also asks for a
// reload after a failed heartbeat).
const clusterReload = 2 * time.Second

// pipelineBufferSize sizes the read and write buffers of the connections
// go-redis keeps for pipelines, as its regular ones (32 KiB), instead of
// its pipeline default of 128 KiB each: a worker's pipelines are batches
// of small commands (renewals, loads, results), which a 32 KiB buffer
// sends and reads in a few more system calls, and a worker with three
// clients would otherwise keep megabytes of buffers on the heap. (A
// Cluster client makes no pipeline pool unless these are set; it is left
// as it is.)
const pipelineBufferSize = 32 << 10

// parseRedisURL parses a redis:// or rediss:// URL. Neither the returned
// errors nor the redacted URL contain the password: url.Parse's own errors,
// which quote the whole URL, are reduced to their reason.
func parseRedisURL(raw string) (*redis.Options, string, error) {
	const hint = "(want redis://[user:password@]host:port/db or rediss://...)"
	if strings.TrimSpace(raw) == "" {
		return nil, "", fmt.Errorf("%w: --%s is empty %s", errInvalidConfig, flagRedisURL, hint)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, "", fmt.Errorf("%w: --%s is not a valid URL: %v %s", errInvalidConfig, flagRedisURL, err, hint)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, "", fmt.Errorf("%w: --%s scheme %q must be redis or rediss %s", errInvalidConfig, flagRedisURL, u.Scheme, hint)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, "", fmt.Errorf("%w: --%s must name a host %s", errInvalidConfig, flagRedisURL, hint)
	}
	p := u.Port()
	if p == "" {
		// go-redis would dial 6379 without a word.
		return nil, "", fmt.Errorf("%w: --%s must name a port, host:port (Redis's default is 6379) %s", errInvalidConfig, flagRedisURL, hint)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return nil, "", fmt.Errorf("%w: --%s port %s must be from 1 to 65535", errInvalidConfig, flagRedisURL, p)
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		// go-redis names the bad part (database, path, option), never the
		// password.
		return nil, "", fmt.Errorf("%w: --%s: %v", errInvalidConfig, flagRedisURL, err)
	}
	if userOnly(u) {
		// redis://secret@host: often a password written where the user
		// name goes; never show it.
		u.User = url.User(redactedUser)
	}
	return opts, u.Redacted(), nil
}

// redactedUser stands for the user name of a URL that gives a user name
// and no password, in logs and errors.
const redactedUser = "xxxxx"

// userOnly reports whether u gives a user name and no password
// (redis://name@host:port).
func userOnly(u *url.URL) bool {
	if u.User == nil {
		return false
	}
	_, hasPassword := u.User.Password()
	return !hasPassword && u.User.Username() != ""
}

// authError explains err, a failure to talk to Redis at c, when it is one
// that no retry fixes (credentials, permissions; see authProblem; the
// kind of server: see topologyProblem), as an
// exit-2 error naming the redacted URL; nil for any other error. Every
// command that connects reports these the same way.
func authError(err error, c connConfig) error {
	problem := authProblem(err)
	if problem == "" {
		problem = topologyProblem(err, c)
	}
	if problem == "" {
		return nil
	}
	if c.UserOnly && (redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS")) {
		problem += "; the URL gives a user name and no password (redis://NAME@host): " +
			"a password alone is written redis://:PASSWORD@host:port, a user and a password redis://USER:PASSWORD@host:port"
	}
	said := err
	var rerr redis.Error
	if errors.As(err, &rerr) {
		said = rerr
	}
	return configError(fmt.Errorf("--%s %s: %s (Redis said: %v)", flagRedisURL, c.RedisURL, problem, said))
}

// sentinelNotServer returns the exit-2 error of a plain --redis-url that
// names a sentinel, when err is a command a sentinel does not know (a
// script, GETRANGE: its words name the command, not the mistake) and the
// server says it is one (INFO server: redis_mode:sentinel); nil
// otherwise, or when the server does not answer within pingTimeout.
func sentinelNotServer(ctx context.Context, client redis.UniversalClient, c connConfig, err error) error {
	if c.Cluster || c.Sentinel != "" || !redis.HasErrorPrefix(err, "unknown command") {
		return nil
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	info, ierr := client.Info(ictx, "server").Result()
	cancel()
	if ierr != nil || !strings.Contains(info, "redis_mode:sentinel") {
		return nil
	}
	var said redis.Error
	errors.As(err, &said)
	return configError(fmt.Errorf("--%s %s: --%s names a sentinel, not a Redis server: add --%s NAME (the master the sentinels monitor) (Redis said: %v)",
		flagRedisURL, c.RedisURL, flagRedisURL, flagSentinel, said))
}

// parseKeys validates the two prefixes: each a valid id, and the two
// namespaces disjoint (keyspace.Overlap), so that no session key can be a
// worker key.
func parseKeys(prefix, sessionPrefix string) (keyspace.Space, error) {
	if err := keyspace.ValidateID(prefix); err != nil {
		return keyspace.Space{}, fmt.Errorf("%w: --%s: %s", errInvalidConfig, flagKeyPrefix, idProblem(err))
	}
	if err := keyspace.ValidateID(sessionPrefix); err != nil {
		return keyspace.Space{}, fmt.Errorf("%w: --%s: %s", errInvalidConfig, flagSessionPrefix, idProblem(err))
	}
	if keyspace.Overlap(prefix, sessionPrefix) {
		return keyspace.Space{}, fmt.Errorf("%w: --%s %q and --%s %q overlap: %s, so that no session key can be a worker key",
			errInvalidConfig, flagKeyPrefix, prefix, flagSessionPrefix, sessionPrefix, keyspace.OverlapRule)
	}
	return keyspace.New(prefix, sessionPrefix)
}

// idProblem says what is wrong with an id refused by keyspace.ValidateID,
// without the package prefixes: "invalid id: <reason>".
func idProblem(err error) string {
	var ie *keyspace.IDError
	if errors.As(err, &ie) {
		return "invalid id: " + ie.Reason
	}
	return err.Error()
}

// workerOptions are the values of the run command's flags, as given.
type workerOptions struct {
	connOptions
	// Poller holds the coordinator's settings as its flags set them
	// (poller.Config.RegisterFlags); parseConfig adds Keys.
	Poller    poller.Config
	HTTPAddr  string
	Profiles  bool // --pprof
	LogLevel  string
	LogFormat string
}

// workerConfig is a validated workerOptions.
type workerConfig struct {
	connConfig
	// Poller is the coordinator's configuration without Client, Poller,
	// Logger and Version, which the run command attaches. Its ID is set
	// (nodes.DefaultID() when --id is empty) and its zero timings are
	// filled (poller.Config.WithDefaults).
	Poller poller.Config
	// HTTPAddr is the health server's address; "" disables it.
	HTTPAddr string
	// Profiles serves /debug/pprof/ on HTTPAddr (--pprof).
	Profiles bool
	// LogLevel and LogFormat ("json" or "console") configure the logger.
	LogLevel  zapcore.Level
	LogFormat string
}

// settings lists the effective configuration, password redacted: the
// connection, the poller's settings (poller.Config.Settings, the one list
// of them) and the process's own. --dry-run prints it, the start log
// logs it.
func (c workerConfig) settings() []poller.Setting {
	httpAddr := c.HTTPAddr
	if httpAddr == "" {
		httpAddr = "(disabled)"
	}
	out := []poller.Setting{
		{Name: flagRedisURL, Value: c.RedisURL},
		{Name: flagKeyPrefix, Value: c.Keys.Prefix},
		{Name: flagSessionPrefix, Value: c.Keys.SessionPrefix},
	}
	out = append(out, c.Poller.Settings()...)
	return append(out,
		poller.Setting{Name: "http-addr", Value: httpAddr},
		poller.Setting{Name: "pprof", Value: strconv.FormatBool(c.Profiles)},
		poller.Setting{Name: "log-level", Value: c.LogLevel.String()},
		poller.Setting{Name: "log-format", Value: c.LogFormat})
}

// parseConfig validates the run command's flags and builds the
// coordinator's configuration. Every error wraps errInvalidConfig, fits on
// one line and names the flag and the rule it breaks; none contains the
// Redis password. It does not touch the network. The coordinator's
// settings are checked by poller.Config.Validate, the one validation that
// poller.New runs too, its messages naming the flags.
func parseConfig(o workerOptions) (workerConfig, error) {
	conn, err := parseConn(o.connOptions)
	if err != nil {
		return workerConfig{}, err
	}
	pc := o.Poller
	pc.Keys = conn.Keys
	if err := pc.Validate(); err != nil {
		var ce *poller.ConfigError
		if errors.As(err, &ce) {
			return workerConfig{}, fmt.Errorf("%w: %s", errInvalidConfig, ce.Text(flagOf))
		}
		return workerConfig{}, fmt.Errorf("%w: %w", errInvalidConfig, err)
	}
	if pc.WaitReplicas > 0 && o.Cluster {
		return workerConfig{}, fmt.Errorf("%w: --wait-replicas needs a single master or Sentinel, not --redis-cluster (WAIT reaches one shard)", errInvalidConfig)
	}
	if pc.ID == "" {
		pc.ID = nodes.DefaultID()
	}
	if err := validateHTTPAddr(o.HTTPAddr); err != nil {
		return workerConfig{}, err
	}
	if o.Profiles && o.HTTPAddr == "" {
		return workerConfig{}, fmt.Errorf("%w: --pprof serves on --http-addr, which is empty (disabled)", errInvalidConfig)
	}
	level, err := zapcore.ParseLevel(o.LogLevel)
	if err != nil || level < zapcore.DebugLevel || level > zapcore.ErrorLevel {
		return workerConfig{}, fmt.Errorf("%w: --log-level %q must be debug, info, warn or error", errInvalidConfig, o.LogLevel)
	}
	if o.LogFormat != "json" && o.LogFormat != "console" {
		return workerConfig{}, fmt.Errorf("%w: --log-format %q must be json or console", errInvalidConfig, o.LogFormat)
	}
	conn.Redis.ClientName = "pollworker:" + pc.ID
	return workerConfig{
		connConfig: conn,
		Poller:     pc.WithDefaults(),
		HTTPAddr:   o.HTTPAddr,
		Profiles:   o.Profiles,
		LogLevel:   level,
		LogFormat:  o.LogFormat,
	}, nil
}

// flagOf names a poller.Config field as the run command does: by its flag
// (--lease-ttl), or by the field for one without a flag.
func flagOf(field string) string {
	if f := poller.FlagName(field); f != "" {
		return "--" + f
	}
	return field
}

// validateHTTPAddr accepts "" (no server) or host:port with a numeric or
// well-known port.
func validateHTTPAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("%w: --http-addr %q must be host:port, :port or empty to disable", errInvalidConfig, addr)
	}
	return nil
}

// zeroMeansOff maps an HTTP poller flag where 0 turns a feature off
// (--max-per-host, --idle-conn-timeout) to httppoll.Config's convention,
// where 0 is the default and a negative value turns it off.
func zeroMeansOff[T int | int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// topologyProblem explains an error that says the servers of --redis-url
// are not of the kind the flags say: --redis-cluster to a server without
// cluster support, --redis-sentinel-master to a server that is no
// sentinel, a plain URL to a node of a Redis Cluster or to a sentinel, or
// a server that does not know a command pollworker sends; "" for any other
// error. No retry fixes these: before, run waited for ever ("Redis does
// not answer yet") and the other commands failed with Redis's words.
func topologyProblem(err error, c connConfig) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	switch {
	case c.Cluster && strings.Contains(msg, "cluster support disabled"):
		return fmt.Sprintf("--%s is set, but the server is not a Redis Cluster node (cluster support disabled): drop --%s for a standalone server", flagCluster, flagCluster)
	case c.Sentinel != "" && strings.Contains(msg, "sentinels") && strings.Contains(msg, "redis: nil") && !strings.Contains(msg, "dial"):
		// Every sentinel answered GET-MASTER-ADDR-BY-NAME with nil:
		// reachable, but none monitors a master of that name.
		return fmt.Sprintf("no sentinel monitors a master named %q (--%s): check the name (redis-cli -p 26379 SENTINEL MASTERS lists them)", c.Sentinel, flagSentinel)
	case c.Sentinel != "" && strings.Contains(strings.ToLower(msg), "unknown command 'sentinel'"):
		return fmt.Sprintf("--%s is set, so --%s must name the sentinels, and this server is not one (it does not know SENTINEL): give the sentinels' addresses (port 26379 by default), or drop --%s for a standalone server",
			flagSentinel, flagRedisURL, flagSentinel)
	case !c.Cluster && c.Sentinel == "" && (strings.Contains(msg, "accepted by Sentinel") || strings.Contains(msg, "unknown command 'get'")):
		// A sentinel refuses data commands: GET, which every Redis knows, or
		// anything but HELLO on the events channel.
		return fmt.Sprintf("--%s names a sentinel, not a Redis server: add --%s NAME (the master the sentinels monitor)", flagRedisURL, flagSentinel)
	case !c.Cluster && c.Sentinel == "" && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "CLUSTERDOWN")):
		return fmt.Sprintf("--%s names a node of a Redis Cluster: add --%s (and, to be safe, list several nodes)", flagRedisURL, flagCluster)
	case redis.HasErrorPrefix(err, "unknown command"):
		return "this Redis does not know a command pollworker needs: renamed or disabled in its configuration (rename-command), or a Redis older than 6.2"
	}
	return ""
}
