package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/poller"
)

// FuzzParseConfig checks parseConfig's promises on any input: errors wrap
// errInvalidConfig, fit on one line and never show the Redis password;
// whatever it accepts, poller.New accepts too (both run
// poller.Config.Validate), and the redacted URL hides the password.
func FuzzParseConfig(f *testing.F) {
	s := int64(time.Second)
	f.Add("redis://127.0.0.1:6379/0", "", 30*s, 10*s, 10*s, 10*s, 10*s, "poll", "session", ":9090", "info", "json")
	f.Add("rediss://user:pa55word@redis:6380/1", "w1", 20*s, 10*s, 10*s, 10*s, 10*s, "poll", "session", "", "debug", "console")
	f.Add("http://user:pa55word@host", "w1", 30*s, 10*s, 10*s, 10*s, 10*s, "poll", "session", ":9090", "info", "json")
	f.Add("redis://127.0.0.1:6379/0", "w 1", 30*s, 10*s, 10*s, 10*s, 10*s, "a{b}", "session", ":9090", "info", "json")
	f.Add("redis://u:p%zz@h", "", int64(10*time.Millisecond), int64(time.Millisecond), int64(time.Millisecond), int64(1), int64(-1), "x", "x", "h:", "warn", "json")

	pollNothing := poller.PollFunc(func(context.Context, *poller.Turn) error { return nil })
	f.Fuzz(func(t *testing.T, redisURL, id string, ttl, renew, heartbeat, discovery, drain int64,
		keyPrefix, sessionPrefix, httpAddr, logLevel, logFormat string) {
		o := workerOptions{
			connOptions: connOptions{RedisURL: redisURL, KeyPrefix: keyPrefix, SessionPrefix: sessionPrefix},
			Poller: poller.Config{
				ID:                id,
				LeaseTTL:          time.Duration(ttl),
				RenewInterval:     time.Duration(renew),
				HeartbeatInterval: time.Duration(heartbeat),
				DiscoveryInterval: time.Duration(discovery),
				DrainTimeout:      time.Duration(drain),
			},
			HTTPAddr:  httpAddr,
			LogLevel:  logLevel,
			LogFormat: logFormat,
		}
		password := secret(redisURL, id, keyPrefix, sessionPrefix, httpAddr, logLevel, logFormat)
		cfg, err := parseConfig(o)
		if err != nil {
			require.ErrorIs(t, err, errInvalidConfig)
			require.NotContains(t, err.Error(), "\n")
			if password != "" {
				require.NotContains(t, err.Error(), password)
			}
			return
		}
		if password != "" {
			require.NotContains(t, cfg.RedisURL, password)
		}
		client := redis.NewClient(cfg.Redis)
		defer func() { _ = client.Close() }()
		pc := cfg.Poller
		pc.Client, pc.Poller = client, pollNothing
		_, err = poller.New(pc)
		require.NoError(t, err, "parseConfig accepted what poller.New rejects")
	})
}

// secret returns the password of raw if it is distinctive enough to look
// for in messages: at least 4 bytes, in no other input and not in the rest
// of the URL (raw or decoded).
func secret(raw string, others ...string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	pw, ok := u.User.Password()
	if !ok || len(pw) < 4 {
		return ""
	}
	rest := *u
	rest.User = url.User(u.User.Username())
	for _, s := range append(others, rest.String(), u.User.Username(), u.Scheme, u.Host, u.Path, u.RawQuery) {
		if strings.Contains(s, pw) {
			return ""
		}
	}
	return pw
}
