package main

import (
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
// that no retry fixes (credentials, permissions; see authProblem), as an
// exit-2 error naming the redacted URL; nil for any other error. Every
// command that connects reports these the same way.
func authError(err error, c connConfig) error {
	problem := authProblem(err)
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
	ID                string
	LeaseTTL          time.Duration
	RenewInterval     time.Duration // 0: follows LeaseTTL (poller.Config.WithDefaults), as the two below
	HeartbeatInterval time.Duration
	DiscoveryInterval time.Duration
	DrainTimeout      time.Duration
	LossQuarantine    time.Duration // < 0: the lease TTL; 0: off
	MaxPolls          int           // 0: no bound
	Weight            float64       // capacity relative to the peers; 0: 1
	KeepWeight        bool          // --shed-when-behind=false
	Labels            string        // k=v,…
	ErrorBackoff      time.Duration // 0: off
	WaitReplicas      int
	HTTPAddr          string
	Profiles          bool // --pprof
	LogLevel          string
	LogFormat         string
}

// workerConfig is a validated workerOptions.
type workerConfig struct {
	connConfig
	// Poller is the coordinator's configuration without Client, Poller,
	// Logger and Version, which the run command attaches. Its ID is set
	// (nodes.DefaultID() when --id is empty).
	Poller poller.Config
	// HTTPAddr is the health server's address; "" disables it.
	HTTPAddr string
	// Profiles serves /debug/pprof/ on HTTPAddr (--pprof).
	Profiles bool
	// LogLevel and LogFormat ("json" or "console") configure the logger.
	LogLevel  zapcore.Level
	LogFormat string
}

// parseConfig validates the run command's flags and builds the
// coordinator's configuration. Every error wraps errInvalidConfig, fits on
// one line and names the flag and the rule it breaks; none contains the
// Redis password. It does not touch the network. Whatever it accepts,
// poller.New accepts too (see FuzzParseConfig).
func parseConfig(o workerOptions) (workerConfig, error) {
	conn, err := parseConn(o.connOptions)
	if err != nil {
		return workerConfig{}, err
	}
	id := o.ID
	if id == "" {
		id = nodes.DefaultID()
	} else if err := keyspace.ValidateID(id); err != nil {
		return workerConfig{}, fmt.Errorf("%w: --id: %s", errInvalidConfig, idProblem(err))
	}
	for _, d := range []struct {
		flag     string
		v        time.Duration
		optional bool // 0 means the default, derived from --lease-ttl
	}{
		{"lease-ttl", o.LeaseTTL, false},
		{"renew-interval", o.RenewInterval, true},
		{"heartbeat-interval", o.HeartbeatInterval, true},
		{"discovery-interval", o.DiscoveryInterval, true},
		{"drain-timeout", o.DrainTimeout, false},
	} {
		switch {
		case d.v == 0 && d.optional:
		case d.v <= 0:
			return workerConfig{}, fmt.Errorf("%w: --%s (%v) must be positive", errInvalidConfig, d.flag, d.v)
		case d.v < minDuration:
			return workerConfig{}, fmt.Errorf("%w: --%s (%v) must be at least %v", errInvalidConfig, d.flag, d.v, minDuration)
		case d.v > maxDuration:
			return workerConfig{}, fmt.Errorf("%w: --%s (%v) must be at most %v", errInvalidConfig, d.flag, d.v, maxDuration)
		}
	}
	if o.WaitReplicas < 0 || o.WaitReplicas > 16 {
		return workerConfig{}, fmt.Errorf("%w: --wait-replicas (%d) must be from 0 to 16", errInvalidConfig, o.WaitReplicas)
	}
	if o.WaitReplicas > 0 && o.Cluster {
		return workerConfig{}, fmt.Errorf("%w: --wait-replicas needs a single master or Sentinel, not --redis-cluster (WAIT reaches one shard)", errInvalidConfig)
	}
	if nodes.ValidateWeight(o.Weight) != nil {
		return workerConfig{}, fmt.Errorf("%w: --weight (%g) must be from 0.001 to %d", errInvalidConfig, o.Weight, nodes.MaxWeight)
	}
	labels, err := nodes.ParseLabels(o.Labels)
	if err != nil {
		return workerConfig{}, fmt.Errorf("%w: --labels: %w", errInvalidConfig, err)
	}
	if o.MaxPolls < 0 {
		return workerConfig{}, fmt.Errorf("%w: --max-polls (%d) must not be negative (0 = no bound)", errInvalidConfig, o.MaxPolls)
	}
	if o.ErrorBackoff < 0 || o.ErrorBackoff > maxDuration {
		return workerConfig{}, fmt.Errorf("%w: --error-backoff (%v) must be from 0 (off) to %v", errInvalidConfig, o.ErrorBackoff, maxDuration)
	}
	if o.LossQuarantine > maxDuration {
		return workerConfig{}, fmt.Errorf("%w: --loss-quarantine (%v) must be at most %v", errInvalidConfig, o.LossQuarantine, maxDuration)
	}
	// The intervals left unset follow --lease-ttl, as the coordinator's
	// defaults do; the effective ones are validated and shown.
	times := poller.Config{LeaseTTL: o.LeaseTTL, RenewInterval: o.RenewInterval,
		HeartbeatInterval: o.HeartbeatInterval, DiscoveryInterval: o.DiscoveryInterval}.WithDefaults()
	o.RenewInterval, o.HeartbeatInterval, o.DiscoveryInterval = times.RenewInterval, times.HeartbeatInterval, times.DiscoveryInterval
	// Both lower bounds in one message, with the value that passes them.
	if need := max(minLeaseTTL, 3*o.RenewInterval); o.LeaseTTL < need {
		if need == minLeaseTTL {
			return workerConfig{}, fmt.Errorf("%w: --lease-ttl (%v) must be at least %v, the lease minimum (and at least 3 × --renew-interval (%v))",
				errInvalidConfig, o.LeaseTTL, need, o.RenewInterval)
		}
		return workerConfig{}, fmt.Errorf("%w: --lease-ttl (%v) must be at least 3 × --renew-interval (%v) = %v",
			errInvalidConfig, o.LeaseTTL, o.RenewInterval, need)
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
	conn.Redis.ClientName = "pollworker:" + id
	return workerConfig{
		connConfig: conn,
		Poller: poller.Config{
			Keys:                 conn.Keys,
			ID:                   id,
			LeaseTTL:             o.LeaseTTL,
			RenewInterval:        o.RenewInterval,
			HeartbeatInterval:    o.HeartbeatInterval,
			DiscoveryInterval:    o.DiscoveryInterval,
			DrainTimeout:         o.DrainTimeout,
			LossQuarantine:       lossQuarantine(o.LossQuarantine),
			MaxPolls:             zeroMeansOff(o.MaxPolls),
			MaxErrorBackoff:      time.Duration(zeroMeansOff(int64(o.ErrorBackoff))),
			WaitReplicas:         o.WaitReplicas,
			Weight:               o.Weight,
			KeepWeightWhenBehind: o.KeepWeight,
			Labels:               labels,
		},
		HTTPAddr:  o.HTTPAddr,
		Profiles:  o.Profiles,
		LogLevel:  level,
		LogFormat: o.LogFormat,
	}, nil
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

// lossQuarantine maps --loss-quarantine to poller.Config.LossQuarantine:
// unset (negative) is the lease TTL (poller's 0), 0 turns it off (-1).
func lossQuarantine(flag time.Duration) time.Duration {
	switch {
	case flag < 0:
		return 0
	case flag == 0:
		return -1
	}
	return flag
}

// zeroMeansOff maps a flag where 0 turns a feature off to the poller's
// convention, where 0 is the default and a negative value turns it off.
func zeroMeansOff[T int | int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
