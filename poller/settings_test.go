package poller

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestValidateRules: one case per rule of Validate, each message naming
// the field (Error) and, rendered as pollworker run does, the flag (Text).
func TestValidateRules(t *testing.T) {
	flagName := func(field string) string {
		if f := FlagName(field); f != "" {
			return "--" + f
		}
		return field
	}
	tests := []struct {
		name       string
		give       func(c *Config)
		want, text string // Error without the prefix; Text with flag names ("": not checked)
	}{
		{"ttl vs renew", func(c *Config) { c.LeaseTTL, c.RenewInterval = 20*time.Second, 10*time.Second },
			"LeaseTTL (20s) must be at least 3 × RenewInterval (10s) = 30s", "--lease-ttl (20s) must be at least 3 × --renew-interval (10s) = 30s"},
		{"ttl below the lease minimum", func(c *Config) { c.LeaseTTL, c.RenewInterval = 9*time.Millisecond, time.Millisecond },
			"LeaseTTL (9ms) must be at least 10ms, the lease minimum (and at least 3 × RenewInterval (1ms))", ""},
		{"ttl alone below the lease minimum", func(c *Config) { c.LeaseTTL, c.RenewInterval = time.Millisecond, 0 },
			"LeaseTTL (1ms) must be at least 10ms, the lease minimum (and at least 3 × RenewInterval (333.333µs))", "--lease-ttl (1ms) must be at least 10ms, the lease minimum (and at least 3 × --renew-interval (333.333µs))"},
		{"negative", func(c *Config) { c.DiscoveryInterval = -time.Second }, "DiscoveryInterval (-1s) must be positive", "--discovery-interval (-1s) must be positive"},
		{"sub-millisecond", func(c *Config) { c.HeartbeatInterval = time.Microsecond }, "HeartbeatInterval (1µs) must be at least 1ms", ""},
		{"over a day", func(c *Config) { c.DrainTimeout = 25 * time.Hour }, "DrainTimeout (25h0m0s) must be at most 24h0m0s", "--drain-timeout (25h0m0s) must be at most 24h0m0s"},
		{"quarantine over a day", func(c *Config) { c.LossQuarantine = 25 * time.Hour }, "LossQuarantine (25h0m0s) must be at most 24h0m0s", ""},
		{"backoff over a day", func(c *Config) { c.MaxErrorBackoff = 25 * time.Hour }, "MaxErrorBackoff (25h0m0s) must be at most 24h0m0s", "--error-backoff (25h0m0s) must be at most 24h0m0s"},
		{"heartbeat ttl", func(c *Config) { c.HeartbeatTTL = 15 * time.Second }, "HeartbeatTTL (15s) must be at least 2 × HeartbeatInterval (10s)", "HeartbeatTTL (15s) must be at least 2 × --heartbeat-interval (10s)"},
		{"request timeout", func(c *Config) { c.RequestTimeout = 10 * time.Second }, "RequestTimeout (10s) must be less than RenewInterval (10s)", ""},
		{"drift margin", func(c *Config) { c.DriftMargin = 15 * time.Second }, "DriftMargin (15s) must be in [0, LeaseTTL/2)", ""},
		{"bad id", func(c *Config) { c.ID = "worker 1" }, `ID: invalid id: "worker 1" has byte ' ' at 6`, `--id: invalid id: "worker 1" has byte ' ' at 6`},
		{"bad prefix", func(c *Config) { c.Keys.Prefix = "a b" }, "key prefix", ""},
		{"wait replicas", func(c *Config) { c.WaitReplicas = 17 }, "WaitReplicas (17) must be from 0 to 16", "--wait-replicas (17) must be from 0 to 16"},
		{"negative wait replicas", func(c *Config) { c.WaitReplicas = -1 }, "WaitReplicas (-1) must be from 0 to 16", ""},
		{"weight", func(c *Config) { c.Weight = 2000 }, "Weight (2000) must be from 0.001 to 1000 (0 means 1)", "--weight (2000) must be from 0.001 to 1000 (0 means 1)"},
		{"labels", func(c *Config) { c.Labels = map[string]string{"a b": "c"} }, "Labels: ", "--labels: "},
		{"batch size", func(c *Config) { c.BatchSize = -1 }, "BatchSize (-1) must not be negative", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			tt.give(&c)
			err := c.Validate()
			require.ErrorIs(t, err, ErrConfig)
			require.True(t, strings.HasPrefix(err.Error(), "poller: invalid config: "+tt.want), "got %q", err)
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			if tt.text != "" {
				require.True(t, strings.HasPrefix(ce.Text(flagName), tt.text), "got %q", ce.Text(flagName))
			}
		})
	}
}

// TestZeroRule: zero is the default everywhere, and Off (or any negative
// value) turns off the settings that can be off; Validate accepts them.
func TestZeroRule(t *testing.T) {
	var zero Config
	require.NoError(t, zero.Validate())
	off := Config{LossQuarantine: Off, MaxPolls: Off, MaxErrorBackoff: Off, BalanceSlack: Off}
	require.NoError(t, off.Validate())
	show := map[string]string{}
	for _, s := range off.Settings() {
		show[s.Name] = s.Value
	}
	require.Equal(t, "off", show["loss-quarantine"])
	require.Equal(t, "off", show["max-polls"])
	require.Equal(t, "off", show["error-backoff"])
}

// TestRegisterFlags parses a command line with the flags RegisterFlags
// registers: each sets its field, "0" is the default and "off" is Off;
// for a setting that can be off, "0" (which once meant off) is refused.
func TestRegisterFlags(t *testing.T) {
	tests := []struct {
		args []string
		want Config
	}{
		{nil, Config{}},
		{[]string{"-lease-ttl", "3s", "-renew-interval", "0", "-id", "w1"}, Config{LeaseTTL: 3 * time.Second, ID: "w1"}},
		{[]string{"-loss-quarantine", "off", "-max-polls", "off", "-error-backoff", "off"}, Config{LossQuarantine: Off, MaxPolls: Off, MaxErrorBackoff: Off}},
		{[]string{"-loss-quarantine", "7s", "-max-polls", "8", "-error-backoff", "1m", "-wait-replicas", "1", "-drain-timeout", "2s"},
			Config{LossQuarantine: 7 * time.Second, MaxPolls: 8, MaxErrorBackoff: time.Minute, WaitReplicas: 1, DrainTimeout: 2 * time.Second}},
		{[]string{"-shed-when-behind=false", "-weight", "2.5", "-labels", "zone=eu,tier=a"},
			Config{KeepWeightWhenBehind: true, Weight: 2.5, Labels: map[string]string{"zone": "eu", "tier": "a"}}},
		{[]string{"-shed-when-behind"}, Config{}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var c Config
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			c.RegisterFlags(fs)
			require.NoError(t, fs.Parse(tt.args))
			require.Equal(t, tt.want, c)
		})
	}
	var c Config
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	require.ErrorContains(t, fs.Parse([]string{"-lease-ttl", "off"}), `"off" is not a duration`, "a setting that cannot be off refuses off")
	require.ErrorContains(t, fs.Parse([]string{"-max-polls", "lots"}), `"lots" is not a whole number or off`)
	for _, name := range []string{"loss-quarantine", "max-polls", "error-backoff"} {
		require.ErrorContains(t, fs.Parse([]string{"-" + name, "0"}), "0 is ambiguous: off turns it off; leave it unset for the default", name)
	}
	require.ErrorContains(t, fs.Parse([]string{"-max-polls", "-5"}), "-5 is negative: off turns it off; leave it unset for the default (1024)")
	require.ErrorContains(t, fs.Parse([]string{"-loss-quarantine", "-1s"}), "-1s is negative: off turns it off")
	require.ErrorContains(t, fs.Parse([]string{"-weight", "0"}), "0 is out of range; leave it unset for the default (1)")
	require.Error(t, fs.Parse([]string{"-labels", "a"}))
	require.Equal(t, "30s", fs.Lookup("lease-ttl").DefValue)
	require.Equal(t, "the lease TTL", fs.Lookup("loss-quarantine").DefValue)
	require.Equal(t, "1024", fs.Lookup("max-polls").DefValue)
	require.Equal(t, "true", fs.Lookup("shed-when-behind").DefValue)
}

// TestSettingsListsEveryFlag: Settings names every flag RegisterFlags
// registers, in the same order, with the effective values.
func TestSettingsListsEveryFlag(t *testing.T) {
	c := Config{LeaseTTL: 3 * time.Second, ID: "w1", Keys: keyspace.Space{}}
	var names []string
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	c.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	got := map[string]string{}
	var listed []string
	for _, s := range c.Settings() {
		got[s.Name] = s.Value
		listed = append(listed, s.Name)
	}
	require.ElementsMatch(t, names, listed)
	require.Equal(t, "1s", got["renew-interval"])
	require.Equal(t, "3s (the lease TTL)", got["loss-quarantine"])
	require.Equal(t, "1024", got["max-polls"])
	require.Equal(t, "1", got["weight"])
	require.Equal(t, "true", got["shed-when-behind"])
	for _, s := range settings {
		require.Equal(t, s.name, FlagName(s.field))
	}
	require.Empty(t, FlagName("Client"))
}

// TestMinRenewAge: half the renewal interval, unless the TTL leaves less
// room for two renewals before a lease's deadline.
func TestMinRenewAge(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	for _, tt := range []struct {
		interval, ttl, drift, want time.Duration
	}{
		{10 * s, 30 * s, 302 * ms, 5 * s},     // the defaults
		{1 * s, 30 * s, 302 * ms, 500 * ms},   // renewing often
		{10 * s, 30 * s, 9800 * ms, 200 * ms}, // a large drift margin: 2 × 10 s + 200 ms = 30 s - 9.8 s
		{10 * s, 30 * s, 10 * s, 0},           // no room at all: every lease at every cycle
		{10 * s, 30 * s, 14 * s, 0},           // less than none
		{100 * ms, 300 * ms, 5 * ms, 50 * ms}, // short leases
	} {
		got := minRenewAge(tt.interval, tt.ttl, tt.drift)
		require.Equal(t, tt.want, got, "interval %v, ttl %v, drift %v", tt.interval, tt.ttl, tt.drift)
	}
}
