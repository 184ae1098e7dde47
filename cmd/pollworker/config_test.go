package main

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
)

// validOptions are the run command's defaults, the intervals that follow
// --lease-ttl given explicitly.
func validOptions() workerOptions {
	return workerOptions{
		connOptions: connOptions{RedisURL: defaultRedisURL, KeyPrefix: "poll", SessionPrefix: "session"},
		Poller: poller.Config{
			LeaseTTL:          30 * time.Second,
			RenewInterval:     10 * time.Second,
			HeartbeatInterval: 10 * time.Second,
			DiscoveryInterval: 10 * time.Second,
			DrainTimeout:      10 * time.Second,
		},
		HTTPAddr:  ":9090",
		LogLevel:  "info",
		LogFormat: "json",
	}
}

func TestParseConfigRules(t *testing.T) {
	tests := []struct {
		name string
		give func(o *workerOptions)
		want string // the error after "invalid config: "
	}{
		{name: "lease ttl below 3 renewals", give: func(o *workerOptions) { o.Poller.LeaseTTL = 20 * time.Second },
			want: "--lease-ttl (20s) must be at least 3 × --renew-interval (10s)"},
		{name: "lease ttl just below 3 renewals", give: func(o *workerOptions) { o.Poller.LeaseTTL = 30*time.Second - time.Nanosecond },
			want: "--lease-ttl (29.999999999s) must be at least 3 × --renew-interval (10s)"},
		{name: "negative lease ttl", give: func(o *workerOptions) { o.Poller.LeaseTTL = -time.Second }, want: "--lease-ttl (-1s) must be positive"},
		{name: "negative renew", give: func(o *workerOptions) { o.Poller.RenewInterval = -time.Second }, want: "--renew-interval (-1s) must be positive"},
		{name: "negative heartbeat", give: func(o *workerOptions) { o.Poller.HeartbeatInterval = -time.Second }, want: "--heartbeat-interval (-1s) must be positive"},
		{name: "negative discovery", give: func(o *workerOptions) { o.Poller.DiscoveryInterval = -time.Second }, want: "--discovery-interval (-1s) must be positive"},
		{name: "negative drain", give: func(o *workerOptions) { o.Poller.DrainTimeout = -time.Second }, want: "--drain-timeout (-1s) must be positive"},
		{name: "wait replicas", give: func(o *workerOptions) { o.Poller.WaitReplicas = 17 }, want: "--wait-replicas (17) must be from 0 to 16"},
		{name: "wait replicas in cluster", give: func(o *workerOptions) { o.Poller.WaitReplicas, o.Cluster = 1, true }, want: "--wait-replicas needs a single master or Sentinel"},
		{name: "weight", give: func(o *workerOptions) { o.Poller.Weight = 0.0001 }, want: "--weight (0.0001) must be from 0.001 to 1000"},
		{name: "error backoff", give: func(o *workerOptions) { o.Poller.MaxErrorBackoff = 25 * time.Hour }, want: "--error-backoff (25h0m0s) must be at most 24h0m0s"},
		{name: "sub-millisecond", give: func(o *workerOptions) { o.Poller.HeartbeatInterval = time.Microsecond }, want: "--heartbeat-interval (1µs) must be at least 1ms"},
		{name: "over a day", give: func(o *workerOptions) { o.Poller.HeartbeatInterval = 25 * time.Hour }, want: "--heartbeat-interval (25h0m0s) must be at most 24h0m0s"},
		{name: "tiny lease ttl", give: func(o *workerOptions) {
			o.Poller.LeaseTTL, o.Poller.RenewInterval = 9*time.Millisecond, time.Millisecond
		},
			want: "--lease-ttl (9ms) must be at least 10ms, the lease minimum (and at least 3 × --renew-interval (1ms))"},
		{name: "redis port out of range", give: func(o *workerOptions) { o.RedisURL = "redis://127.0.0.1:99999/0" },
			want: "--redis-url port 99999 must be from 1 to 65535"},
		{name: "redis port zero", give: func(o *workerOptions) { o.RedisURL = "redis://u:hunter2@127.0.0.1:0/0" },
			want: "--redis-url port 0 must be from 1 to 65535"},
		{name: "redis seed port out of range", give: func(o *workerOptions) { o.RedisURL, o.Cluster = "redis://a:7000,redis://b:70000", true },
			want: "--redis-url port 70000 must be from 1 to 65535"},
		{name: "redis url without port", give: func(o *workerOptions) { o.RedisURL = "redis://127.0.0.1/0" },
			want: "--redis-url must name a port, host:port (Redis's default is 6379) (want redis://"},
		{name: "redis url with an empty port", give: func(o *workerOptions) { o.RedisURL = "redis://u:hunter2@127.0.0.1:/0" },
			want: "--redis-url must name a port, host:port (Redis's default is 6379) (want redis://"},
		{name: "redis url of host alone", give: func(o *workerOptions) { o.RedisURL = "redis://127.0.0.1" },
			want: "--redis-url must name a port"},
		{name: "sentinel without port", give: func(o *workerOptions) { o.RedisURL, o.Sentinel = "redis://a:26379,redis://b", "m" },
			want: "--redis-url must name a port"},
		{name: "redis url without host", give: func(o *workerOptions) { o.RedisURL = "redis://:6379/0" },
			want: "--redis-url must name a host (want redis://"},
		{name: "opaque redis url", give: func(o *workerOptions) { o.RedisURL = "redis:hunter2@host" },
			want: "--redis-url must name a host (want redis://"},
		{name: "http scheme", give: func(o *workerOptions) { o.RedisURL = "http://127.0.0.1:6379" },
			want: `--redis-url scheme "http" must be redis or rediss`},
		{name: "no scheme", give: func(o *workerOptions) { o.RedisURL = "localhost:6379" },
			want: `--redis-url scheme "localhost" must be redis or rediss`},
		{name: "unix socket", give: func(o *workerOptions) { o.RedisURL = "unix:///tmp/redis.sock" },
			want: `--redis-url scheme "unix" must be redis or rediss`},
		{name: "empty url", give: func(o *workerOptions) { o.RedisURL = " " }, want: "--redis-url is empty"},
		{name: "unparsable url", give: func(o *workerOptions) { o.RedisURL = "redis://u:hunter2@host:port" },
			want: `--redis-url is not a valid URL: invalid port ":port" after host`},
		{name: "bad database", give: func(o *workerOptions) { o.RedisURL = "redis://u:hunter2@host:6379/x" },
			want: `--redis-url: redis: invalid database number: "x"`},
		{name: "unknown option", give: func(o *workerOptions) { o.RedisURL = "redis://host:6379/0?bogus=1" },
			want: "--redis-url: redis: unexpected option: bogus"},
		{name: "bad key prefix", give: func(o *workerOptions) { o.KeyPrefix = "a{b}" }, want: `--key-prefix: invalid id: "a{b}" has byte '{' at 1`},
		{name: "empty key prefix", give: func(o *workerOptions) { o.KeyPrefix = "" }, want: "--key-prefix: invalid id: empty"},
		{name: "bad session prefix", give: func(o *workerOptions) { o.SessionPrefix = "a b" }, want: "--session-prefix: invalid id"},
		{name: "same prefixes", give: func(o *workerOptions) { o.SessionPrefix = "poll" },
			want: `--key-prefix "poll" and --session-prefix "poll" overlap: neither may equal the other or start with the other followed by ":"`},
		{name: "session prefix inside the worker keys", give: func(o *workerOptions) { o.SessionPrefix = "poll:sessions" },
			want: `--key-prefix "poll" and --session-prefix "poll:sessions" overlap: neither may equal`},
		{name: "key prefix inside the session keys", give: func(o *workerOptions) { o.KeyPrefix = "session:poll" },
			want: `--key-prefix "session:poll" and --session-prefix "session" overlap: neither may equal`},
		{name: "bad id", give: func(o *workerOptions) { o.Poller.ID = "worker 1" }, want: `--id: invalid id: "worker 1" has byte ' ' at 6`},
		{name: "http addr without port", give: func(o *workerOptions) { o.HTTPAddr = "9090" },
			want: `--http-addr "9090" must be host:port, :port or empty to disable`},
		{name: "http addr bad port", give: func(o *workerOptions) { o.HTTPAddr = "localhost:nope" },
			want: `--http-addr "localhost:nope" must be host:port`},
		{name: "pprof without http addr", give: func(o *workerOptions) { o.Profiles, o.HTTPAddr = true, "" },
			want: "--pprof serves on --http-addr, which is empty (disabled)"},
		{name: "log level", give: func(o *workerOptions) { o.LogLevel = "trace" }, want: `--log-level "trace" must be debug, info, warn or error`},
		{name: "log level panic", give: func(o *workerOptions) { o.LogLevel = "panic" }, want: `--log-level "panic" must be`},
		{name: "log format", give: func(o *workerOptions) { o.LogFormat = "text" }, want: `--log-format "text" must be json or console`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validOptions()
			tt.give(&o)
			_, err := parseConfig(o)
			require.ErrorIs(t, err, errInvalidConfig)
			require.True(t, strings.HasPrefix(err.Error(), "invalid config: "+tt.want), "got %q", err)
			require.NotContains(t, err.Error(), "\n")
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// TestLeaseTTLMessageNamesAValueThatPasses: the --lease-ttl error names the
// rule that binds and a value that parseConfig then accepts (issue 10,
// item 12: --lease-ttl 1ms said "at least 10ms", which breaks the 3× rule).
func TestLeaseTTLMessageNamesAValueThatPasses(t *testing.T) {
	for _, tt := range []struct{ ttl, renew time.Duration }{
		{time.Millisecond, 10 * time.Second},
		{9 * time.Millisecond, time.Millisecond},
		{time.Millisecond, 3 * time.Millisecond},
		{20 * time.Second, 10 * time.Second},
	} {
		o := validOptions()
		o.Poller.LeaseTTL, o.Poller.RenewInterval = tt.ttl, tt.renew
		_, err := parseConfig(o)
		require.Error(t, err)
		m := regexp.MustCompile(`must be at least (?:3 × --renew-interval \([^)]*\) = )?([0-9.]+[a-zµ]+)`).FindStringSubmatch(err.Error())
		require.NotNil(t, m, "%v", err)
		need, perr := time.ParseDuration(m[1])
		require.NoError(t, perr)
		o.Poller.LeaseTTL = need
		_, err = parseConfig(o)
		require.NoError(t, err, "the value named, %v, passes", need)
	}
	o := validOptions()
	o.Poller.LeaseTTL = time.Millisecond
	_, err := parseConfig(o)
	require.EqualError(t, err, "invalid config: --lease-ttl (1ms) must be at least 3 × --renew-interval (10s) = 30s")
}

func TestParseConfigAccepts(t *testing.T) {
	cfg, err := parseConfig(validOptions())
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Poller.ID, "default id")
	require.NoError(t, keyspace.ValidateID(cfg.Poller.ID))
	require.Equal(t, 30*time.Second, cfg.Poller.LeaseTTL)
	require.Equal(t, 10*time.Second, cfg.Poller.RenewInterval)
	require.Equal(t, 10*time.Second, cfg.Poller.HeartbeatInterval)
	require.Equal(t, 10*time.Second, cfg.Poller.DiscoveryInterval)
	require.Equal(t, 10*time.Second, cfg.Poller.DrainTimeout)
	require.Equal(t, keyspace.Space{Prefix: "poll", SessionPrefix: "session"}, cfg.Poller.Keys)
	require.Equal(t, "127.0.0.1:6379", cfg.Redis.Addr)
	require.Equal(t, zapcore.InfoLevel, cfg.LogLevel)
	require.Nil(t, cfg.Poller.Client, "attached by the run command")
	require.Nil(t, cfg.Poller.Poller, "attached by the run command")

	o := validOptions()
	o.RedisURL = "rediss://alice:hunter2@redis.example:6380/3"
	o.Poller.ID = "w-1"
	o.Poller.LeaseTTL, o.Poller.RenewInterval = 3*time.Second, time.Second // exactly 3 ×
	o.HTTPAddr = ""
	o.KeyPrefix, o.SessionPrefix = "app/poll", "app/session"
	o.LogLevel, o.LogFormat = "debug", "console"
	cfg, err = parseConfig(o)
	require.NoError(t, err)
	require.Equal(t, "w-1", cfg.Poller.ID)
	require.Equal(t, "rediss://alice:xxxxx@redis.example:6380/3", cfg.RedisURL)
	require.Equal(t, "alice", cfg.Redis.Username)
	require.Equal(t, "hunter2", cfg.Redis.Password)
	require.Equal(t, 3, cfg.Redis.DB)
	require.NotNil(t, cfg.Redis.TLSConfig)
	require.Equal(t, "pollworker:w-1", cfg.Redis.ClientName)
	require.Equal(t, "app/poll:results", cfg.Keys.Results())
	require.Equal(t, zapcore.DebugLevel, cfg.LogLevel)
	require.Empty(t, cfg.HTTPAddr)
}

// TestRunBadConfigOneLine runs the app in-process: every rule violation
// exits 2 with one line on stderr, before anything connects.
func TestRunBadConfigOneLine(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{name: "lease ttl", give: []string{"--lease-ttl", "20s", "--renew-interval", "10s"},
			want: "pollworker: invalid config: --lease-ttl (20s) must be at least 3 × --renew-interval (10s) = 30s\n"},
		{name: "scheme", give: []string{"--redis-url", "http://u:hunter2@h"},
			want: `pollworker: invalid config: --redis-url scheme "http" must be redis or rediss (want redis://[user:password@]host:port/db or rediss://...)` + "\n"},
		{name: "prefix", give: []string{"--key-prefix", "a b"},
			want: `pollworker: invalid config: --key-prefix: invalid id: "a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)` + "\n"},
		{name: "overlapping prefixes", give: []string{"--session-prefix", "poll:sessions"},
			want: `pollworker: invalid config: --key-prefix "poll" and --session-prefix "poll:sessions" overlap: ` +
				`neither may equal the other or start with the other followed by ":", so that no session key can be a worker key` + "\n"},
		{name: "non-positive", give: []string{"--drain-timeout=-1s"},
			want: "pollworker: invalid config: --drain-timeout (-1s) must be positive\n"},
		{name: "off where nothing can be off", give: []string{"--lease-ttl", "off"}},
		{name: "unknown flag", give: []string{"--bogus"},
			want: "pollworker: run: flag provided but not defined: -bogus (see pollworker run --help)\n"},
		{name: "unparsable duration", give: []string{"--lease-ttl", "soon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Nothing listens on port 1: a connection attempt would fail
			// differently (and slowly).
			r := runApp(t, append([]string{"run", "--redis-url", "redis://127.0.0.1:1", "--http-addr", ""}, tt.give...)...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			oneLine(t, r.stderr)
			if tt.want != "" {
				require.Equal(t, tt.want, r.stderr)
			}
			require.Empty(t, r.stdout)
		})
	}
}

func TestEnvVars(t *testing.T) {
	env := map[string]string{
		"POLLWORKER_REDIS_URL":          "redis://bob:hunter2@10.0.0.1:6390/2",
		"POLLWORKER_ID":                 "w-env",
		"POLLWORKER_LEASE_TTL":          "9s",
		"POLLWORKER_RENEW_INTERVAL":     "3s",
		"POLLWORKER_HEARTBEAT_INTERVAL": "2s",
		"POLLWORKER_DISCOVERY_INTERVAL": "4s",
		"POLLWORKER_DRAIN_TIMEOUT":      "5s",
		"POLLWORKER_LOSS_QUARANTINE":    "7s",
		"POLLWORKER_KEY_PREFIX":         "kp",
		"POLLWORKER_SESSION_PREFIX":     "sp",
		"POLLWORKER_HTTP_ADDR":          "127.0.0.1:9999",
		"POLLWORKER_LOG_LEVEL":          "warn",
		"POLLWORKER_LOG_FORMAT":         "console",
		"POLLWORKER_WEIGHT":             "2.5",
		"POLLWORKER_LABELS":             "zone=eu-1,egress=static",
		"POLLWORKER_MAX_POLLS":          "off",
		"POLLWORKER_ERROR_BACKOFF":      "1m",
		"POLLWORKER_SHED_WHEN_BEHIND":   "false",
		"POLLWORKER_WAIT_REPLICAS":      "1",
		"POLLWORKER_RECORD":             "changes",
		"POLLWORKER_RECORD_MAXLEN":      "500",
		"POLLWORKER_RECORD_FLUSH":       "50ms",
		"POLLWORKER_RECORD_QUEUE":       "20",
		"POLLWORKER_RECORD_BODY":        "16",
		"POLLWORKER_MAX_PER_HOST":       "0",
		"POLLWORKER_POLL_TIMEOUT":       "3s",
		"POLLWORKER_IDLE_CONN_TIMEOUT":  "0s",
		"POLLWORKER_MAX_RETRY_AFTER":    "0s",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	r := runApp(t, "run", "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, `redis-url:          redis://bob:xxxxx@10.0.0.1:6390/2
key-prefix:         kp
session-prefix:     sp
id:                 w-env
lease-ttl:          9s
renew-interval:     3s
heartbeat-interval: 2s
discovery-interval: 4s
drain-timeout:      5s
loss-quarantine:    7s
wait-replicas:      1
max-polls:          off
weight:             2.5
shed-when-behind:   false
labels:             egress=static,zone=eu-1
error-backoff:      1m0s
http-addr:          127.0.0.1:9999
pprof:              false
log-level:          warn
log-format:         console
record:             changes
record-maxlen:      500
record-flush:       50ms
record-queue:       20
record-body:        16
max-per-host:       0 (no bound)
poll-timeout:       3s
idle-conn-timeout:  0 (no limit)
max-retry-after:    0 (Retry-After ignored)
profiles:           (none)
`, r.stdout)

	// A flag beats its variable.
	r = runApp(t, "run", "--dry-run", "--id", "w-flag", "--http-addr", "")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "id:                 w-flag\n")
	require.Contains(t, r.stdout, "http-addr:          (disabled)\n")

	// Rules apply to variables too.
	t.Setenv("POLLWORKER_LEASE_TTL", "8s")
	r = runApp(t, "run", "--dry-run")
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, "pollworker: invalid config: --lease-ttl (8s) must be at least 3 × --renew-interval (3s) = 9s\n", r.stderr)

	// A value a flag cannot parse names the variable and the flag, not
	// the flag's Go type.
	for _, tt := range []struct{ env, value, want string }{
		{"POLLWORKER_MAX_POLLS", "abc", `pollworker: invalid value "abc" in environment variable POLLWORKER_MAX_POLLS (--max-polls): "abc" is not a whole number or off` + "\n"},
		{"POLLWORKER_WEIGHT", "abc", `pollworker: invalid value "abc" in environment variable POLLWORKER_WEIGHT (--weight): "abc" is not a number` + "\n"},
		{"POLLWORKER_LEASE_TTL", "soon", `pollworker: invalid value "soon" in environment variable POLLWORKER_LEASE_TTL (--lease-ttl): "soon" is not a duration` + "\n"},
	} {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			r := runApp(t, "run", "--dry-run")
			require.Equal(t, exitUsage, r.code)
			require.Equal(t, tt.want, r.stderr)
		})
	}

	// So do the shared flags of the other commands.
	t.Setenv("POLLWORKER_KEY_PREFIX", "sp")
	r = runApp(t, "sessions", "list")
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, `pollworker: invalid config: --key-prefix "sp" and --session-prefix "sp" overlap: `+
		`neither may equal the other or start with the other followed by ":", so that no session key can be a worker key`+"\n", r.stderr)
}

// TestBinaryBadConfig checks the real process: exit status 2 and one line
// on stderr.
func TestBinaryBadConfig(t *testing.T) {
	cmd := exec.Command(binary(t), "run", "--lease-ttl", "20s", "--renew-interval", "10s", "--redis-url", "redis://127.0.0.1:1")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "exits non-zero: %v", err)
	require.Equal(t, exitUsage, ee.ExitCode())
	require.Equal(t, "pollworker: invalid config: --lease-ttl (20s) must be at least 3 × --renew-interval (10s) = 30s\n", stderr.String())
	require.Empty(t, stdout.String())
}

func TestVersion(t *testing.T) {
	r := runApp(t, "version")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "version: dev\n")
	require.Contains(t, r.stdout, "commit:  ")
	require.Contains(t, r.stdout, "built:   ")

	r = runApp(t, "--version")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "dev (commit ")
}

func TestHelp(t *testing.T) {
	r := runApp(t, "--help")
	require.Equal(t, exitOK, r.code)
	for _, c := range []string{"run", "sessions", "status", "demo", "version"} {
		require.Contains(t, r.stdout, "   "+c+" ")
	}
	r = runApp(t, "run", "--help")
	require.Equal(t, exitOK, r.code)
	for _, env := range []string{"REDIS_URL", "ID", "LEASE_TTL", "RENEW_INTERVAL", "HEARTBEAT_INTERVAL",
		"DISCOVERY_INTERVAL", "DRAIN_TIMEOUT", "KEY_PREFIX", "SESSION_PREFIX", "HTTP_ADDR", "LOG_LEVEL", "LOG_FORMAT"} {
		require.Contains(t, r.stdout, "[$POLLWORKER_"+env+"]")
	}
}

// TestIntervalsFollowLeaseTTL: --lease-ttl alone sets the renew, heartbeat
// and discovery intervals (issue 22 item 5: --lease-ttl 3s alone was
// refused, and with --renew-interval 1s a crashed worker's sessions still
// waited for its 30s heartbeat); an interval given is kept.
func TestIntervalsFollowLeaseTTL(t *testing.T) {
	r := runApp(t, "run", "--dry-run", "--lease-ttl", "3s")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "renew-interval:     1s\nheartbeat-interval: 1s\ndiscovery-interval: 1s\n")

	r = runApp(t, "run", "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "lease-ttl:          30s\nrenew-interval:     10s\nheartbeat-interval: 10s\ndiscovery-interval: 10s\n")

	r = runApp(t, "run", "--dry-run", "--lease-ttl", "90s", "--heartbeat-interval", "5s")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "renew-interval:     30s\nheartbeat-interval: 5s\ndiscovery-interval: 10s\n")

	o := validOptions()
	o.Poller.LeaseTTL, o.Poller.RenewInterval, o.Poller.HeartbeatInterval, o.Poller.DiscoveryInterval = 3*time.Second, 0, 0, 0
	cfg, err := parseConfig(o)
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, cfg.Poller.WithDefaults().FailoverBound())
}

// TestRedisURLWithoutPortExit2: --dry-run refuses a URL without a port,
// exit 2 naming the rule (issue 22: redis://127.0.0.1:/0 and
// redis://127.0.0.1 passed --dry-run and connected to 6379).
func TestRedisURLWithoutPortExit2(t *testing.T) {
	for _, give := range []string{"redis://127.0.0.1:/0", "redis://127.0.0.1"} {
		r := runApp(t, "run", "--dry-run", "--redis-url", give)
		require.Equal(t, exitUsage, r.code, r.stdout)
		require.Equal(t, "pollworker: invalid config: --redis-url must name a port, host:port (Redis's default is 6379) "+
			"(want redis://[user:password@]host:port/db or rediss://...)\n", r.stderr)
		r = runApp(t, "sessions", "--redis-url", give, "list")
		require.Equal(t, exitUsage, r.code, r.stdout)
		require.Contains(t, r.stderr, "--redis-url must name a port")
	}
}

// TestAdminBadCredentialsExplained: every command explains a refused
// password as run does, exit 2, with the secret redacted; a URL that gives
// a user name and no password (a password written where the user goes)
// gets the hint how to write one (issue 22: sessions commands printed a
// raw "read session revision: WRONGPASS…", redis://hunter2@host a bare
// NOAUTH).
func TestAdminBadCredentialsExplained(t *testing.T) {
	srv := redistest.Start(t)
	require.NoError(t, srv.Client(t).ConfigSet(ctxT(t), "requirepass", "right-secret").Err())
	const userOnlyHint = "the URL gives a user name and no password (redis://NAME@host): a password alone is written " +
		"redis://:PASSWORD@host:port, a user and a password redis://USER:PASSWORD@host:port"
	tests := []struct {
		name string
		url  string
		args []string
		want string
	}{
		{name: "sessions list, wrong password", url: "redis://:hunter2@" + srv.Addr() + "/0", args: []string{"sessions", "list"},
			want: "pollworker: invalid config: --redis-url redis://:xxxxx@" + srv.Addr() + "/0: Redis rejected the user name or password: " +
				"check the credentials in the URL (Redis said: WRONGPASS"},
		{name: "status, no password", url: "redis://" + srv.Addr() + "/0", args: []string{"status"},
			want: "pollworker: invalid config: --redis-url redis://" + srv.Addr() + "/0: Redis requires a password: " +
				"give it as redis://[user]:password@host:port (Redis said: NOAUTH"},
		{name: "sessions add, password as the user name", url: "redis://hunter2@" + srv.Addr() + "/0",
			args: []string{"sessions", "add", "--id", "s1", "--url", "http://127.0.0.1:1/", "--interval", "1s"},
			want: "pollworker: invalid config: --redis-url redis://xxxxx@" + srv.Addr() + "/0: "},
		{name: "explain, password as the user name", url: "redis://hunter2@" + srv.Addr() + "/0", args: []string{"explain", "s1"},
			want: "pollworker: invalid config: --redis-url redis://xxxxx@" + srv.Addr() + "/0: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{tt.args[0], "--redis-url", tt.url}, tt.args[1:]...)
			r := runApp(t, args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			oneLine(t, r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, tt.want), "got %q", r.stderr)
			require.NotContains(t, r.stderr, "hunter2")
			if strings.HasPrefix(tt.url, "redis://hunter2@") {
				require.Contains(t, r.stderr, userOnlyHint)
			}
		})
	}
	code, stderr, _ := runUntilExit(t, "--redis-url", "redis://hunter2@"+srv.Addr()+"/0", "--id", "auth-w")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, lastLine(stderr), userOnlyHint)
	require.NotContains(t, stderr, "hunter2")
}
