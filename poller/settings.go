package poller

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/state"
	"go.uber.org/zap"
	"k8s.io/utils/clock"
)

// Bounds of every duration of Config: Redis TTLs count milliseconds, and
// 24h keeps the derived ones (3 × HeartbeatInterval) from overflowing.
const (
	MinDuration = time.Millisecond
	MaxDuration = 24 * time.Hour
	// MaxWaitReplicas is the most replicas WaitReplicas may wait for.
	MaxWaitReplicas = 16
	// minLeaseTTL is lease.New's minimum TTL.
	minLeaseTTL = 10 * time.Millisecond
)

// A setting is one field of Config that an operator sets: pollworker
// run's flag of the same name, the line of its --dry-run listing and the
// field of its start log.
type setting struct {
	name  string // the flag: lease-ttl
	field string // the Config field: LeaseTTL
	usage string
	// bind returns the flag.Value that reads and sets the field of c.
	bind func(c *Config) flag.Value
	// show is the effective value of c (after WithDefaults) in words.
	show func(c Config) string
}

// settings is the one list of Config's operator settings, in the order
// the flags, the listing and the start log show them.
var settings = []setting{
	{name: "id", field: "ID", usage: "this worker's id, unique among live workers",
		bind: func(c *Config) flag.Value { return &stringValue{p: &c.ID, zero: "<hostname>"} },
		show: func(c Config) string { return c.ID }},
	{name: "lease-ttl", field: "LeaseTTL", usage: "lease time to live; at least 3 × --renew-interval. The three intervals below follow it unless set, " +
		"so that it alone sets how long a crashed worker's sessions wait for a new poller: until its leases and its heartbeat (3 heartbeat intervals) " +
		"have expired, at most --lease-ttl + --discovery-interval with those defaults (40s; 4s with --lease-ttl 3s)",
		bind: func(c *Config) flag.Value { return durationValue(&c.LeaseTTL, DefaultLeaseTTL.String(), false) },
		show: func(c Config) string { return c.LeaseTTL.String() }},
	{name: "renew-interval", field: "RenewInterval", usage: "time between lease renewals",
		bind: func(c *Config) flag.Value { return durationValue(&c.RenewInterval, "--lease-ttl / 3", false) },
		show: func(c Config) string { return c.RenewInterval.String() }},
	{name: "heartbeat-interval", field: "HeartbeatInterval", usage: "time between heartbeats; a worker is live for 3 heartbeat intervals",
		bind: func(c *Config) flag.Value { return durationValue(&c.HeartbeatInterval, "--lease-ttl / 3", false) },
		show: func(c Config) string { return c.HeartbeatInterval.String() }},
	{name: "discovery-interval", field: "DiscoveryInterval", usage: "time between full rounds (membership, sessions, ownership) when no event arrives",
		bind: func(c *Config) flag.Value {
			return durationValue(&c.DiscoveryInterval, "--lease-ttl / 3, at most 10s", false)
		},
		show: func(c Config) string { return c.DiscoveryInterval.String() }},
	{name: "drain-timeout", field: "DrainTimeout", usage: "on SIGTERM/SIGINT, how long to wait for polls to stop and leases to be released",
		bind: func(c *Config) flag.Value {
			return durationValue(&c.DrainTimeout, DefaultDrainTimeout.String(), false)
		},
		show: func(c Config) string { return c.DrainTimeout.String() }},
	{name: "loss-quarantine", field: "LossQuarantine", usage: "after Redis lost data (restart without persistence, FLUSHALL, failover, eviction), take no free lease for this long, " +
		"so that every earlier lease has ended at its holder first; off turns it off. A brand-new keyspace looks the same and waits once (pollworker init skips that wait)",
		bind: func(c *Config) flag.Value {
			return durationValue(&c.LossQuarantine, "the lease TTL", true)
		},
		show: func(c Config) string {
			switch {
			case c.LossQuarantine < 0:
				return "off"
			case c.LossQuarantine == 0:
				return c.LeaseTTL.String() + " (the lease TTL)"
			}
			return c.LossQuarantine.String()
		}},
	{name: "wait-replicas", field: "WaitReplicas", usage: "count an acquisition or renewal only once WAIT confirms this many replicas have it " +
		"(a Sentinel failover to a caught-up replica then loses no lease; a WAIT that falls short stops the polls of those leases); 0 = no WAIT",
		bind: func(c *Config) flag.Value { return intValue(&c.WaitReplicas, "0", false) },
		show: func(c Config) string { return strconv.Itoa(c.WaitReplicas) }},
	{name: "max-polls", field: "MaxPolls", usage: "polls run at once at most (fewer while the CPU is the bound, down to max(64, 8 × GOMAXPROCS)); " +
		"a poll due while all run waits for one to end, in its fair turn (counted as deferred, " +
		"and late when it starts later than a tenth of its interval); the leases and heartbeats never wait; off = no bound",
		bind: func(c *Config) flag.Value {
			return intValue(&c.MaxPolls, strconv.Itoa(DefaultMaxPolls), true)
		},
		show: func(c Config) string {
			return offOr(c.MaxPolls < 0, strconv.Itoa(orDefault(c.MaxPolls, DefaultMaxPolls)))
		}},
	{name: "weight", field: "Weight", usage: "this worker's capacity relative to its peers: a worker of weight 2 is planned twice the poll load of one of weight 1 " +
		"(carried in its heartbeat; from 0.001 to 1000)",
		bind: func(c *Config) flag.Value { return &floatValue{p: &c.Weight, zero: "1"} },
		show: func(c Config) string { return strconv.FormatFloat(orDefault(c.Weight, 1), 'g', -1, 64) }},
	{name: "shed-when-behind", field: "KeepWeightWhenBehind", usage: "while this worker stays behind (pollworker_behind), lower the weight its heartbeat carries " +
		"to 3/4 each --lease-ttl (to a quarter of --weight at least), so that its peers take load off it, while some peer keeps up (a fleet behind as a whole sheds nothing); it takes a tenth back after each 10 × --lease-ttl " +
		"it keeps up; --shed-when-behind=false keeps --weight",
		bind: func(c *Config) flag.Value { return &notValue{&c.KeepWeightWhenBehind} },
		show: func(c Config) string { return strconv.FormatBool(!c.KeepWeightWhenBehind) }},
	{name: "labels", field: "Labels", usage: "this worker's labels, key=value,…: a session with a --selector is polled only by workers whose labels include it " +
		"(carried in the heartbeat; fixed for the process)",
		bind: func(c *Config) flag.Value { return &labelsValue{&c.Labels} },
		show: func(c Config) string { return nodes.Labels(c.Labels).String() }},
	{name: "error-backoff", field: "MaxErrorBackoff", usage: "a session whose polls keep failing waits longer between polls: (2^min(k,5) - 1) × its interval more " +
		"after k failures in a row, at most this, with jitter; a success resets it; off turns the backoff off",
		bind: func(c *Config) flag.Value {
			return durationValue(&c.MaxErrorBackoff, DefaultMaxErrorBackoff.String(), true)
		},
		show: func(c Config) string {
			return offOr(c.MaxErrorBackoff < 0, orDefault(c.MaxErrorBackoff, DefaultMaxErrorBackoff).String())
		}},
}

// offOr is "off" when off, else v.
func offOr(off bool, v string) string {
	if off {
		return "off"
	}
	return v
}

// orDefault is v, or def when v is zero.
func orDefault[T int | float64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// FlagRegistrar is what RegisterFlags registers flags on: a
// *flag.FlagSet, or a command-line library's adapter (pollworker run's
// registers them in this order, with their environment variables).
type FlagRegistrar interface {
	Var(value flag.Value, name, usage string)
}

// RegisterFlags registers Config's operator settings on fs, each setting
// the field of c of the same meaning, with its default and the zero rule
// (0 or unset: the default; "off": Off), as dskit's RegisterFlags does.
// Each value is also a flag.Getter; its String at registration is the
// default in words. pollworker run's flags are these; c.Validate (New
// calls it) checks them.
func (c *Config) RegisterFlags(fs FlagRegistrar) {
	for _, s := range settings {
		fs.Var(s.bind(c), s.name, s.usage)
	}
}

// A Setting is one line of Config.Settings: a setting's flag name and its
// effective value in words.
type Setting struct {
	Name, Value string
}

// Settings lists c's operator settings (the flags RegisterFlags
// registers) with their effective values: zero ones as WithDefaults fills
// them, Off as "off". pollworker run's --dry-run and start log show these.
func (c Config) Settings() []Setting {
	c = c.WithDefaults()
	out := make([]Setting, len(settings))
	for i, s := range settings {
		out[i] = Setting{Name: s.name, Value: s.show(c)}
	}
	return out
}

// FlagName is the flag RegisterFlags registers for the Config field
// named field (LeaseTTL: lease-ttl), or "" for a field that has none.
func FlagName(field string) string {
	for _, s := range settings {
		if s.field == field {
			return s.name
		}
	}
	return ""
}

// ConfigError is a Config that breaks a rule. It wraps ErrConfig. Its
// message names the fields (LeaseTTL); Text names them otherwise, as
// pollworker run names its flags (--lease-ttl).
type ConfigError struct {
	msg string // each field named as fieldMark + name + fieldMark
}

// fieldMark brackets a field's name in a ConfigError's msg.
const fieldMark = "\x00"

func (e *ConfigError) Error() string {
	return ErrConfig.Error() + ": " + e.Text(func(field string) string { return field })
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// Text is the message without its "poller: invalid config: " prefix,
// each field named by name(field).
func (e *ConfigError) Text(name func(field string) string) string {
	parts := strings.Split(e.msg, fieldMark)
	for i := 1; i < len(parts); i += 2 {
		parts[i] = name(parts[i])
	}
	return strings.Join(parts, "")
}

// configErr formats a ConfigError; {Field} in format names a field.
func configErr(format string, args ...any) error {
	format = fieldRef.ReplaceAllString(format, fieldMark+"$1"+fieldMark)
	return &ConfigError{msg: fmt.Sprintf(format, args...)}
}

// fieldRef is a {Field} (or {%s}) of configErr's format.
var fieldRef = regexp.MustCompile(`\{([A-Z][A-Za-z]*|%s)\}`)

// Validate checks c's settings against every rule, after filling the zero
// ones with their defaults (WithDefaults); it does not need Client or
// Poller, which New requires too. An error is a *ConfigError naming the
// field and the rule.
func (c Config) Validate() error {
	if err := c.Keys.Validate(); err != nil {
		return configErr("%s", err)
	}
	if c.ID != "" {
		if err := keyspace.ValidateID(c.ID); err != nil {
			var ie *keyspace.IDError
			if errors.As(err, &ie) {
				return configErr("{ID}: invalid id: %s", ie.Reason)
			}
			return configErr("{ID}: %s", err)
		}
	}
	c.defaultTimes()
	if err := c.validateTimes(); err != nil {
		return err
	}
	switch {
	case c.WaitReplicas < 0 || c.WaitReplicas > MaxWaitReplicas:
		return configErr("{WaitReplicas} (%d) must be from 0 to %d", c.WaitReplicas, MaxWaitReplicas)
	case nodes.ValidateWeight(c.Weight) != nil:
		return configErr("{Weight} (%g) must be from 0.001 to %d (0 means 1)", c.Weight, nodes.MaxWeight)
	case c.BatchSize < 0:
		return configErr("{BatchSize} (%d) must not be negative", c.BatchSize)
	case math.IsNaN(c.BalanceSlack) || math.IsInf(c.BalanceSlack, 0):
		return configErr("{BalanceSlack} (%g) must be finite", c.BalanceSlack)
	}
	if err := nodes.Labels(c.Labels).Validate(); err != nil {
		return configErr("{Labels}: %s", err)
	}
	return nil
}

// validateLeaseTTLFirst is validateLeaseTTL before the intervals the TTL
// sets by default (a third of it) are checked, so that the error names the
// setting to change; nil while either is not positive (checked after).
func (c *Config) validateLeaseTTLFirst() error {
	if c.LeaseTTL <= 0 || c.RenewInterval <= 0 {
		return nil
	}
	return c.validateLeaseTTL()
}

// validateLeaseTTL checks both lower bounds of the lease TTL, in one
// message with the value that passes them.
func (c *Config) validateLeaseTTL() error {
	if need := max(minLeaseTTL, 3*c.RenewInterval); c.LeaseTTL < need {
		if need == minLeaseTTL {
			return configErr("{LeaseTTL} (%v) must be at least %v, the lease minimum (and at least 3 × {RenewInterval} (%v))", c.LeaseTTL, need, c.RenewInterval)
		}
		return configErr("{LeaseTTL} (%v) must be at least 3 × {RenewInterval} (%v) = %v", c.LeaseTTL, c.RenewInterval, need)
	}
	return nil
}

// Kinds of durations for validateTimes.
const (
	timing  = iota // an interval or timeout an operator sets: at least MinDuration
	derived        // defaults from the timings; may be below MinDuration
	offable        // a negative value is Off
)

// validateTimes checks the durations (after defaultTimes) and the rules
// between them.
func (c *Config) validateTimes() error {
	if err := c.validateLeaseTTLFirst(); err != nil {
		return err
	}
	for _, d := range []struct {
		field string
		v     time.Duration
		kind  int // timing: at least MinDuration; derived: from another; offable: negative is Off
	}{
		{"LeaseTTL", c.LeaseTTL, timing}, {"RenewInterval", c.RenewInterval, timing},
		{"HeartbeatInterval", c.HeartbeatInterval, timing}, {"HeartbeatTTL", c.HeartbeatTTL, derived},
		{"DiscoveryInterval", c.DiscoveryInterval, timing}, {"OrphanGrace", c.OrphanGrace, derived},
		{"DrainTimeout", c.DrainTimeout, timing}, {"RequestTimeout", c.RequestTimeout, derived},
		{"LossQuarantine", c.LossQuarantine, offable}, {"MaxErrorBackoff", c.MaxErrorBackoff, offable},
	} {
		switch {
		case d.kind == offable && d.v <= 0:
		case d.v < 0:
			return configErr("{%s} (%v) must be positive", d.field, d.v)
		case d.kind == timing && d.v < MinDuration:
			return configErr("{%s} (%v) must be at least %v", d.field, d.v, MinDuration)
		case d.v > MaxDuration:
			return configErr("{%s} (%v) must be at most %v", d.field, d.v, MaxDuration)
		}
	}
	if err := c.validateLeaseTTL(); err != nil {
		return err
	}
	switch {
	case c.HeartbeatTTL < 2*c.HeartbeatInterval:
		return configErr("{HeartbeatTTL} (%v) must be at least 2 × {HeartbeatInterval} (%v)", c.HeartbeatTTL, c.HeartbeatInterval)
	case c.RequestTimeout >= c.RenewInterval:
		return configErr("{RequestTimeout} (%v) must be less than {RenewInterval} (%v)", c.RequestTimeout, c.RenewInterval)
	case c.DriftMargin < 0 || c.DriftMargin >= c.LeaseTTL/2:
		return configErr("{DriftMargin} (%v) must be in [0, {LeaseTTL}/2)", c.DriftMargin)
	}
	return nil
}

// isNil reports whether v is nil or holds a nil pointer (a typed nil
// Client would pass v == nil and crash a background goroutine later).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// withDefaults fills zero fields and validates; errors name the rule.
func (c Config) withDefaults() (Config, error) {
	if isNil(c.Client) {
		return c, configErr("{Client} is required")
	}
	if f, ok := c.Poller.(PollFunc); isNil(c.Poller) || ok && f == nil {
		return c, configErr("{Poller} is required")
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	c.defaultTimes()
	if c.BalanceSlack == 0 {
		c.BalanceSlack = DefaultBalanceSlack
	}
	if c.MaxPolls == 0 {
		c.MaxPolls = DefaultMaxPolls
	}
	if c.MaxErrorBackoff == 0 {
		c.MaxErrorBackoff = DefaultMaxErrorBackoff
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.Stateful && c.StateStore == nil {
		c.StateStore = state.NewStore(c.Client, c.Keys, state.WithClock(c.Clock))
	}
	return c, nil
}
