package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/timeline"
	"github.com/pollworker/pollworker/metrics"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/state"
)

// httpShutdownTimeout bounds the health server's shutdown after the drain.
const httpShutdownTimeout = 5 * time.Second

// runCommand is the worker; see run for setRedisLogger.
func runCommand(setRedisLogger func(*zap.Logger)) *cli.Command {
	// The worker's settings are poller.Config's: its flags set them, with
	// the library's defaults and zero rule, and its Validate checks them.
	var settings poller.Config
	str := func(name, def, usage string) cli.Flag {
		return &cli.StringFlag{Name: name, Value: def, Usage: usage, Sources: fromEnv(name)}
	}
	flags := connFlags()
	settings.RegisterFlags((*cliFlags)(&flags))
	flags = append(flags,
		str("http-addr", ":9090", "address of the HTTP server (/healthz, /readyz, /metrics, status page at /); empty disables it"),
		&cli.BoolFlag{Name: "pprof", Sources: fromEnv("pprof"),
			Usage: "serve Go's runtime profiles at /debug/pprof/ on --http-addr (CPU, heap, goroutines; off by default: a profile shows the process's internals to whoever reaches the port)"},
		str("log-level", "info", "debug, info, warn or error"),
		str("log-format", "json", "json or console"),
		&cli.BoolFlag{Name: "dry-run", Usage: "validate the configuration, print it and exit without connecting"},
	)
	flags = append(flags, recordFlags()...)
	flags = append(flags, httpFlags()...)
	return &cli.Command{
		Name:  "run",
		Usage: "run a worker until SIGTERM, SIGINT or SIGHUP",
		Description: "Joins the workers sharing --redis-url and polls its share of the sessions over HTTP (each\n" +
			"session's method, headers, body and expected statuses; credentials and TLS from --profiles),\n" +
			"recording the results (--record) in the stream <key-prefix>:results, or in 16 streams\n" +
			"under --redis-cluster, written in batches on a connection of their own (see\n" +
			"\"pollworker results\"). Redis may be down at start:\n" +
			"the worker reports not ready (/readyz 503) and polls nothing until Redis is reachable.\n" +
			"SIGTERM, SIGINT or SIGHUP (a closed terminal) drains (leaves, stops polls, releases each\n" +
			"lease as its poll returns; polls past --drain-timeout are cancelled) and exits 0 (1 if the\n" +
			"drain was incomplete: a poll ignored its cancellation, or Redis did not answer); a second\n" +
			"signal kills the process. Nothing is reloaded on SIGHUP: the --profiles\n" +
			"file is read at start (restart to change it); the files its profiles name are re-read\n" +
			"when they change.\n\n" +
			"One --id, one process: before it starts, the worker checks the id's heartbeat entry.\n" +
			"If a live worker holds it (the entry is renewed), run exits 2 naming that worker's host\n" +
			"and pid. If the entry is not renewed (a worker killed with the same id, restarted at once),\n" +
			"run waits for it to expire, at most 3 × --heartbeat-interval, logging why, then starts.",
		Flags: flags,
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			cfg, err := parseConfig(workerOptions{
				connOptions: connOptionsFrom(cmd),
				Poller:      settings,
				HTTPAddr:    cmd.String("http-addr"),
				Profiles:    cmd.Bool("pprof"),
				LogLevel:    cmd.String("log-level"),
				LogFormat:   cmd.String("log-format"),
			})
			if err != nil {
				return configError(err)
			}
			rc, err := parseRecording(cmd)
			if err != nil {
				return configError(err)
			}
			if rc.HTTP, err = parseHTTPOptions(cmd); err != nil {
				return configError(err)
			}
			if cfg.Poller.Labels, err = withProfileLabels(cfg.Poller.Labels, rc.HTTP.Profiles); err != nil {
				return configError(err)
			}
			if cmd.Bool("dry-run") {
				printConfig(cmd.Root().Writer, cfg, rc)
				return nil
			}
			return runWorker(ctx, cfg, rc, cmd.Root().ErrWriter, setRedisLogger)
		}),
	}
}

// printConfig writes the effective configuration, password redacted:
// the connection, the poller's settings (poller.Config.Settings), the
// process's own, and the HTTP poller's and the recording's (rc).
func printConfig(w io.Writer, cfg workerConfig, rc recording) {
	for _, kv := range append(cfg.settings(), rc.settings()...) {
		fmt.Fprintf(w, "%-19s %s\n", kv.Name+":", kv.Value)
	}
}

// defaultGCPercent is the GOGC of a worker whose environment sets none.
// A worker's heap is mostly long-lived (a lease, a schedule entry and a
// state record per held session), and Go's default of 100 lets the heap
// grow to twice that before each collection; 75 lowers that peak by about
// an eighth for a little more collector CPU, as Prometheus (whose heap is
// also mostly long-lived) does by default. GOGC in the environment wins.
// The memory limit: setDefaultMemoryLimit.
const defaultGCPercent = 75

// setDefaultGCPercent sets the collector's GOGC to defaultGCPercent unless
// getenv("GOGC") is set, and returns the GOGC in effect (-1: off).
func setDefaultGCPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		v := debug.SetGCPercent(100) // read the value the runtime parsed ...
		debug.SetGCPercent(v)        // ... and keep it
		return v
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

// runWorker runs a coordinator with the HTTP poller until ctx is done, then
// drains it. Logs go to logw, and go-redis's own lines too if
// setRedisLogger is set. The health server starts first; the coordinator
// starts once preflight has found Redis answering and the id free, and
// until then the worker reports not ready.
func runWorker(ctx context.Context, cfg workerConfig, rc recording, logw io.Writer, setRedisLogger func(*zap.Logger)) error {
	// The coordinator and the poller name the worker in their own fields.
	base := newLogger(logw, cfg.LogLevel, cfg.LogFormat)
	defer func() { _ = base.Sync() }()
	log := base.With(zap.String("instance", cfg.Poller.ID))
	if setRedisLogger != nil {
		setRedisLogger(log.Named("go-redis"))
	}

	// Bind first: a taken --http-addr is refused before anything else is
	// set up or logged.
	ln, err := listenHTTP(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	if ln != nil {
		defer func() { _ = ln.Close() }() // when the server never took it
	}
	gcPercent := setDefaultGCPercent(os.Getenv)
	memLimit, memLimitFrom := setDefaultMemoryLimit(os.Getenv, cgroupMemoryFiles())
	tracerProvider, stopTracing, err := tracingFromEnv(ctx, os.Getenv, currentBuild().Version, cfg.Poller.ID)
	if err != nil {
		return configError(err)
	}
	defer func() {
		// Flush the last spans, the drain's among them.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(fctx)
	}()

	client := cfg.newClient()
	defer func() { _ = client.Close() }()
	failing := newFailing() // the status page's table, told by the poller
	hp, rec, stopRecorder, err := newHTTPPoller(cfg, rc, failing, base)
	if err != nil {
		return configError(err)
	}
	defer stopRecorder()
	defer hp.CloseIdleConnections()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	built := currentBuild()
	if rec != nil {
		reg.MustRegister(recorderMetrics(rec)...)
	}
	reg.MustRegister(httpPollMetrics(hp)...)
	obs, err := metrics.New(reg, metrics.WithBuildInfo(built.Version, built.Commit))
	if err != nil {
		return err
	}
	events := newRecentEvents(50)
	pc := cfg.Poller
	pc.Client, pc.Poller, pc.Logger, pc.Version = client, hp, base, built.Version
	pc.Observer = pageObserver{Observer: obs, events: events}
	pc.TracerProvider = tracerProvider
	// The HTTP poller's fenced state (one script call per changed poll, and
	// the loads before a session's first poll here) goes through a small
	// pool of its own: a burst of saves at a fleet's start, or a slow
	// Redis, never holds a connection the heartbeat and renewals wait for.
	stateClient := cfg.newClientNamed(cfg.Redis.ClientName+":state", statePoolSize)
	defer func() { _ = stateClient.Close() }()
	pc.Stateful, pc.StateStore = true, state.NewStore(stateClient, cfg.Keys)
	coord, err := poller.New(pc)
	if err != nil {
		return configError(err)
	}
	obs.Watch(coord)
	reg.MustRegister(pollMetrics(coord)...)
	reg.MustRegister(placementMetrics(coord)...)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var srv *http.Server
	srvErr := make(chan error, 1) // the health server's failure, nil after Shutdown
	if ln == nil {
		srvErr <- nil
	} else {
		ready := &readiness{coordinator: coord.NotReady, ping: func(ctx context.Context) error { return client.Ping(ctx).Err() }}
		behind := func() string { return coord.PollStats().Overload() }
		srv = &http.Server{
			Handler: healthHandler(ready.NotReady, behind, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
				statusPageConfig{self: coord.ID(), ready: ready.Ready, read: (&pageReader{client: client, keys: cfg.Keys}).read,
					events: events, failing: failing.list, behind: behind,
					fleetFailing: func(ctx context.Context, st clusterStatus) ([]failingSession, int, error) {
						ids := make([]string, 0, len(st.Nodes))
						for _, n := range st.Nodes {
							if n.ID != coord.ID() { // this worker's own: from memory (failing.list)
								ids = append(ids, n.ID)
							}
						}
						rows, total, _, err := readFleetFailing(ctx, client, cfg.Keys, ids)
						return rows, total, err
					},
					charts: func(ctx context.Context, st clusterStatus) (pageCharts, error) {
						return readCharts(ctx, client, cfg.Keys, st, time.Now())
					}}.handler(), cfg.Profiles),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          zap.NewStdLog(log.Named("http")),
		}
		log.Info("health server listening", zap.String("http_addr", ln.Addr().String()))
		go func() {
			err := srv.Serve(ln)
			if errors.Is(err, http.ErrServerClosed) {
				srvErr <- nil
				return
			}
			log.Error("health server failed; draining", zap.Error(err))
			srvErr <- fmt.Errorf("health server: %w", err)
			cancel()
		}()
	}

	if err := preflight(ctx, client, cfg, log); err != nil {
		shutdownHTTP(srv)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			if err := <-srvErr; err != nil {
				return err
			}
			log.Info("worker stopped before it started")
			return nil
		}
		return err
	}

	start := []zap.Field{zap.String("version", built.Version)}
	for _, kv := range append(cfg.settings(), rc.settings()...) {
		start = append(start, zap.String(strings.ReplaceAll(kv.Name, "-", "_"), kv.Value))
	}
	if memLimitFrom != "" {
		start = append(start, zap.Int64("gomemlimit_bytes", memLimit), zap.String("gomemlimit_from", memLimitFrom))
	}
	log.Info("worker starting", append(start, zap.Int("gogc", gcPercent))...)
	// The timeline the status pages chart (internal/timeline): best
	// effort, one small append per worker every 10 s.
	tlCtx, stopTimeline := context.WithCancel(ctx)
	tlDone := make(chan struct{})
	go func() {
		defer close(tlDone)
		_ = (&timeline.Writer{Client: client, Key: cfg.Keys.Timeline(coord.ID()),
			Read:    func() timeline.Counters { return workerCounters(coord, hp) },
			OnError: func(err error) { log.Debug("timeline append failed", zap.Error(err)) },
			// The failing sessions, for the status pages' fleet table.
			Also: func(ctx context.Context, pipe redis.Pipeliner, ttl time.Duration) {
				publishFailing(ctx, pipe, cfg.Keys.Failing(coord.ID()), failing.list(), ttl)
			}}).Run(tlCtx)
	}()
	runErr := coord.Run(ctx)
	stopTimeline()
	<-tlDone
	stopRecorder() // after the drain: the last polls' results are flushed

	shutdownHTTP(srv)
	if err := <-srvErr; err != nil {
		return errors.Join(err, runErr)
	}
	var dup *nodes.DuplicateIDError
	if errors.As(runErr, &dup) {
		log.Error("worker stopped: its id is held by another worker", zap.Error(runErr))
		return duplicateIDError(dup)
	}
	if runErr != nil {
		log.Error("worker stopped; the drain was incomplete", zap.Error(runErr))
		return fmt.Errorf("drain: %w", runErr)
	}
	log.Info("worker stopped")
	return nil
}

// listenHTTP binds addr, the health server's --http-addr; nil for ""
// (disabled). An address it cannot bind (taken by another worker, say) is
// an exit-2 error naming the flag.
func listenHTTP(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var se *os.SyscallError
		if errors.As(err, &se) {
			err = se.Err // "address already in use", without the repeated address
		}
		return nil, configError(fmt.Errorf("--http-addr %s: cannot listen: %w (each worker on a host needs its own --http-addr; \"\" disables the server)", addr, err))
	}
	return ln, nil
}

// shutdownHTTP stops the health server, if any, within httpShutdownTimeout.
func shutdownHTTP(srv *http.Server) {
	if srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	_ = srv.Shutdown(sctx)
}

// preflightRetry is how often preflight tries again while Redis does not
// answer.
const preflightRetry = time.Second

// preflight returns once Redis answers and this worker's id is free: it
// waits while Redis is unreachable (the worker is not ready meanwhile, as
// documented) and while a dead worker's heartbeat entry for the same id has
// not expired. It returns an exit-2 error when a live worker holds the id
// or Redis refuses what no retry fixes (credentials, permissions: see
// authProblem), and ctx's error when ctx ends first.
func preflight(ctx context.Context, client redis.UniversalClient, cfg workerConfig, log *zap.Logger) error {
	pc := cfg.Poller
	ttl := pc.HeartbeatTTL
	if ttl == 0 {
		ttl = 3 * pc.HeartbeatInterval // poller's default
	}
	reg, err := nodes.New(nodes.Config{Client: client, Keys: cfg.Keys, ID: pc.ID, TTL: ttl, Logger: log})
	if err != nil {
		return configError(err)
	}
	every := min(max(ttl/20, 10*time.Millisecond), time.Second)
	onWait := func(c nodes.Claim) {
		log.Warn("another worker's heartbeat entry holds this id; waiting for it to expire "+
			"(a worker killed and restarted with the same id); if it is renewed, that worker is alive and this one exits",
			zap.String("holder_host", c.Info.Host), zap.Int("holder_pid", c.Info.PID),
			zap.String("holder_incarnation", c.Info.Incarnation), zap.Duration("expires_in", c.TTL))
	}
	ticker := time.NewTicker(preflightRetry)
	defer ticker.Stop()
	for warned := false; ; {
		err := checkRedis(ctx, client, cfg.connConfig)
		if err == nil {
			err = checkWritable(ctx, client, cfg.connConfig)
		}
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = nodes.CheckChannel(cctx, client, cfg.Keys, true)
			cancel()
		}
		if err == nil {
			err = reg.WaitForID(ctx, every, onWait)
		}
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = claimSessionPrefix(cctx, client, cfg.Keys)
			cancel()
		}
		var dup *nodes.DuplicateIDError
		var usage *exitError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &dup):
			return duplicateIDError(dup)
		case errors.As(err, &usage):
			return err
		case authError(err, cfg.connConfig) != nil:
			// Refused by Redis after the PING (NOPERM for the heartbeat's
			// script, a key or the session prefix's claim): no retry fixes it.
			return authError(err, cfg.connConfig)
		case ctx.Err() != nil:
			return ctx.Err()
		case !warned:
			warned = true
			log.Warn("Redis does not answer yet; not ready until it does", zap.Error(err))
		default:
			log.Debug("Redis does not answer yet", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// Bounds of checkRedis.
const (
	pingTimeout     = 2 * time.Second         // the PING, dial and handshake included
	probeDial       = time.Second             // TCP connect of a TLS probe
	probeHandshake  = 1500 * time.Millisecond // TLS handshake of a TLS probe
	tlsSchemeAdvice = "check rediss:// vs redis://"
)

// checkRedis PINGs Redis once, within pingTimeout, and tells mistakes in
// the configuration from outages: it returns an exit-2 error (password
// redacted) when Redis refuses the credentials, when --redis-url says TLS
// (rediss://) and the server does not complete a TLS handshake, or when it
// says plain text and the server speaks TLS. Any other failure is returned
// as is, to be retried.
func checkRedis(ctx context.Context, client redis.UniversalClient, cfg connConfig) error {
	if cfg.Redis.TLSConfig != nil {
		// Before the PING: go-redis would wait its whole dial timeout for a
		// handshake that a plain-text server never answers.
		for _, addr := range cfg.Addrs {
			if err := probeTLS(ctx, addr, cfg.Redis.TLSConfig); err != nil {
				return configError(fmt.Errorf("--%s %s: %w", flagRedisURL, cfg.RedisURL, err))
			}
		}
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := client.Ping(pctx).Err()
	cancel()
	if err == nil {
		return nil
	}
	if aerr := authError(err, cfg); aerr != nil {
		return aerr
	}
	if cfg.Redis.TLSConfig == nil && ctx.Err() == nil && speaksTLS(ctx, cfg.Addrs[0]) {
		return configError(fmt.Errorf("--%s %s: the server speaks TLS (%v): %s", flagRedisURL, cfg.RedisURL, err, tlsSchemeAdvice))
	}
	return fmt.Errorf("ping %s: %w", cfg.RedisURL, err)
}

// checkWritable refuses (exit 2) a --redis-url that names a replica: a
// worker there can neither heartbeat nor take a lease, and would idle,
// logging READONLY, for as long as it runs; and one that names a Cluster
// node without --redis-cluster (INFO cluster). Under Sentinel or Cluster the
// client finds the masters itself; where INFO is refused the check is
// skipped.
func checkWritable(ctx context.Context, client redis.UniversalClient, cfg connConfig) error {
	if cfg.Cluster || cfg.Sentinel != "" {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, pingTimeout)
	info, err := client.Info(ictx, "replication", "cluster").Result()
	cancel()
	if err != nil {
		return nil // not this check's business: an ACL without +info, or the next PING says
	}
	if strings.Contains(info, "cluster_enabled:1") {
		// Its keys here may answer (those of its slots) and the others
		// MOVED: a worker would join, be planned sessions and poll few.
		return configError(fmt.Errorf("--%s %s names a node of a Redis Cluster: add --%s (and, to be safe, list several nodes)",
			flagRedisURL, cfg.RedisURL, flagCluster))
	}
	if master, ok := replicaOf(info); ok {
		return configError(fmt.Errorf("--%s %s names a replica (of %s): workers write to the master: give its address, or list the sentinels in --%s with --%s",
			flagRedisURL, cfg.RedisURL, master, flagRedisURL, flagSentinel))
	}
	return nil
}

// replicaOf reads INFO replication: the master's host:port when the
// server is a replica.
func replicaOf(info string) (master string, ok bool) {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, found := strings.Cut(strings.TrimSpace(line), ":"); found {
			fields[k] = v
		}
	}
	if fields["role"] != "slave" && fields["role"] != "replica" {
		return "", false
	}
	return net.JoinHostPort(fields["master_host"], fields["master_port"]), true
}

// authProblem explains a Redis error that no retry can fix: credentials,
// permissions or a database that does not exist; "" for any other error.
func authProblem(err error) string {
	switch {
	case redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "invalid password"):
		return "Redis rejected the user name or password: check the credentials in the URL"
	case redis.HasErrorPrefix(err, "NOAUTH"):
		return "Redis requires a password: give it as redis://[user]:password@host:port"
	case redis.HasErrorPrefix(err, "NOPERM"):
		return "the Redis user lacks a permission pollworker needs (a command, a key or the channel): give it the ACL of docs/deploying.md, \"Redis ACL and TLS\""
	case redis.HasErrorPrefix(err, "DB index is out of range"):
		return "Redis has no database of that number (the /N at the end of the URL): it has 16, 0 to 15, unless its databases setting says otherwise"
	case redis.HasErrorPrefix(err, "SELECT is not allowed in cluster mode"):
		return "a Redis Cluster has database 0 only: end the URL with /0"
	case redis.HasErrorPrefix(err, "AUTH") || redis.HasErrorPrefix(err, "Client sent AUTH"):
		return "the URL gives a password but Redis has none set: remove it from the URL or set one in Redis"
	}
	return ""
}

// probeTLS opens one TCP connection to addr and tries a TLS handshake with
// conf, within probeDial + probeHandshake. It returns an error only when the
// server is reachable and clearly does not speak TLS (a non-TLS reply, or
// no reply at all within probeHandshake) or rejects the certificate.
// Unreachable servers are not its business.
func probeTLS(ctx context.Context, addr string, conf *tls.Config) error {
	d := net.Dialer{Timeout: probeDial}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeHandshake))
	err = tls.Client(conn, conf.Clone()).HandshakeContext(ctx)
	var header tls.RecordHeaderError
	var ne net.Error
	var verify *tls.CertificateVerificationError
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case errors.As(err, &header):
		return fmt.Errorf("%s answered the TLS handshake with something else: the server does not speak TLS? %s", addr, tlsSchemeAdvice)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no TLS handshake with %s within %v: the server does not speak TLS? %s", addr, probeHandshake, tlsSchemeAdvice)
	case errors.As(err, &verify):
		return fmt.Errorf("TLS certificate of %s not accepted (%v): check --%s and the host name in the URL", addr, verify.Err, flagTLSCA)
	}
	return nil
}

// speaksTLS reports whether addr completes a TLS handshake (certificate not
// checked: only the protocol is in question), within probeDial +
// probeHandshake.
func speaksTLS(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: probeDial}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeHandshake))
	//nolint:gosec // a protocol probe: nothing is sent over this connection
	err = tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}).HandshakeContext(ctx)
	return err == nil
}

// duplicateIDError is the exit-2 error of a worker whose --id another
// worker holds.
func duplicateIDError(dup *nodes.DuplicateIDError) error {
	if dup.TakenOver {
		// Not a mistake in the flags: this worker was paused or cut off
		// past its heartbeat TTL, and a successor under the same id (a
		// restarted pod) took over; exit 1, as for any runtime failure.
		return fmt.Errorf("--id %s: %w: this worker stopped, leaving the id to its successor", dup.ID, dup)
	}
	return configError(fmt.Errorf("--id: %w; every worker needs its own --id", dup))
}

// Defaults and bounds of the recording flags.
const (
	minRecordFlush = time.Millisecond
	maxRecordFlush = time.Minute
	maxRecordQueue = 10_000_000
	maxRecordLen   = 100_000_000
	// recordPoolSize is the connection pool of the recording client (per
	// master in Cluster): one flush at a time, plus one for a redial.
	recordPoolSize = 2
	// statePoolSize is the connection pool of the per-session state client
	// (per master): saves are one short script call each.
	statePoolSize = 8
)

// recordFlags are the run command's flags for recording results.
func recordFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "record", Value: "all", Sources: fromEnv("record"),
			Usage: "which poll results to record: all, changes (only a result whose response changed: another status, error class, ETag or body than the session's previous poll, whichever worker made it) or none"},
		&cli.IntFlag{Name: "record-body", Value: 0, Sources: fromEnv("record-body"),
			Usage: fmt.Sprintf("record the first N bytes of each response body with its result (0 to %d; each result then takes up to N more bytes of Redis memory)", httppoll.MaxBodyBytes)},
		&cli.IntFlag{Name: "record-maxlen", Value: results.DefaultStreamMaxLen, Sources: fromEnv("record-maxlen"),
			Usage: "about how many results the streams keep in all (XADD MAXLEN ~; in Cluster split over 16 streams): retention = this / results per second"},
		&cli.DurationFlag{Name: "record-flush", Value: results.DefaultFlushInterval, Sources: fromEnv("record-flush"),
			Usage: "longest a result waits before it is written; results are written in one pipeline per flush"},
		&cli.IntFlag{Name: "record-queue", Value: results.DefaultQueueSize, Sources: fromEnv("record-queue"),
			Usage: "results waiting for a flush at most; when Redis is slower, the oldest are dropped (and counted), polls never wait"},
	}
}

// recording is the validated configuration of the run command's HTTP
// poller: recording, and HTTP the politeness flags.
type recording struct {
	Mode   results.RecordMode
	MaxLen int64
	Flush  time.Duration
	Queue  int
	Body   int
	HTTP   httpOptions
}

// settings lists the recording's and the HTTP poller's effective
// settings, as workerConfig.settings does the rest.
func (rc recording) settings() []poller.Setting {
	orNone := func(v, zero string, isZero bool) string {
		if isZero {
			return zero
		}
		return v
	}
	profiles := "(none)"
	if rc.HTTP.ProfilesFile != "" {
		profiles = rc.HTTP.ProfilesFile + " (" + strings.Join(slices.Sorted(maps.Keys(rc.HTTP.Profiles)), ", ") + ")"
	}
	return []poller.Setting{
		{Name: "record", Value: rc.Mode.String()},
		{Name: "record-maxlen", Value: strconv.FormatInt(rc.MaxLen, 10)},
		{Name: "record-flush", Value: rc.Flush.String()},
		{Name: "record-queue", Value: strconv.Itoa(rc.Queue)},
		{Name: "record-body", Value: strconv.Itoa(rc.Body)},
		{Name: "max-per-host", Value: orNone(strconv.Itoa(rc.HTTP.MaxPerHost), "0 (no bound)", rc.HTTP.MaxPerHost <= 0)},
		{Name: "poll-timeout", Value: rc.HTTP.PollTimeout.String()},
		{Name: "idle-conn-timeout", Value: orNone(rc.HTTP.IdleConnTimeout.String(), "0 (no limit)", rc.HTTP.IdleConnTimeout <= 0)},
		{Name: "max-retry-after", Value: orNone(rc.HTTP.MaxRetryAfter.String(), "0 (Retry-After ignored)", rc.HTTP.MaxRetryAfter <= 0)},
		{Name: "profiles", Value: profiles},
	}
}

// Bounds of the HTTP poller's flags.
const (
	minPollTimeout = 10 * time.Millisecond
	maxPollTimeout = 5 * time.Minute
	// Bounds of --idle-conn-timeout (0 is allowed too: never).
	minIdleConnTimeout = 100 * time.Millisecond
	maxIdleConnTimeout = time.Hour
)

// httpFlags are the run command's flags for the HTTP requests.
func httpFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-per-host", Value: httppoll.DefaultMaxPerHost, Sources: fromEnv("max-per-host"),
			Usage: "requests in flight to one host (host:port of the URL) at most, per worker; a due poll of a full host waits in the scheduler for its fair turn (no failure, no backoff; a worker behind for it reports the host); 0 = no bound"},
		&cli.DurationFlag{Name: "poll-timeout", Value: httppoll.DefaultTimeout, Sources: fromEnv("poll-timeout"),
			Usage: "bound on one poll (the wait for a slot of its host, the request and reading the body), and never more than the session's interval; from 10ms to 5m"},
		&cli.DurationFlag{Name: "idle-conn-timeout", Value: httppoll.DefaultIdleConnTimeout, Sources: fromEnv("idle-conn-timeout"),
			Usage: "close a keep-alive connection to a target after it has been unused this long (the connections a burst opened close; those in use stay open); below common servers' 5s, so the worker closes first; from 100ms to 1h, 0 = never"},
		&cli.StringFlag{Name: "profiles", Sources: fromEnv("profiles"),
			Usage: "YAML file of worker-side profiles (credentials from files or the environment, TLS settings) that sessions name with --profile; secrets stay on the worker, never in Redis. Read at start (restart the worker to change it); the files its profiles name are read again when they change. The worker announces each profile as the label profile/<name>=yes. See docs/http-poller.md"},
		&cli.DurationFlag{Name: "max-retry-after", Value: httppoll.DefaultMaxRetryAfter, Sources: fromEnv("max-retry-after"),
			Usage: "a 429 or 503 with Retry-After (seconds or a date) moves the session's next poll to that time, at most this far ahead (counted in pollworker_http_throttled_total); 0 ignores Retry-After"},
	}
}

// httpOptions are the validated values of httpFlags.
type httpOptions struct {
	MaxPerHost      int // 0: no bound
	PollTimeout     time.Duration
	IdleConnTimeout time.Duration // 0: no limit
	MaxRetryAfter   time.Duration // 0: Retry-After ignored
	// Profiles are read from --profiles (ProfilesFile); nil without it.
	Profiles     map[string]httppoll.Profile
	ProfilesFile string
}

// parseHTTPOptions validates the httpFlags of cmd.
func parseHTTPOptions(cmd *cli.Command) (httpOptions, error) {
	o := httpOptions{MaxPerHost: int(cmd.Int("max-per-host")), PollTimeout: cmd.Duration("poll-timeout"),
		IdleConnTimeout: cmd.Duration("idle-conn-timeout")}
	switch {
	case o.IdleConnTimeout != 0 && (o.IdleConnTimeout < minIdleConnTimeout || o.IdleConnTimeout > maxIdleConnTimeout):
		return httpOptions{}, fmt.Errorf("%w: --idle-conn-timeout (%v) must be from %v to %v, or 0 (never)", errInvalidConfig, o.IdleConnTimeout, minIdleConnTimeout, maxIdleConnTimeout)
	case o.MaxPerHost < 0:
		return httpOptions{}, fmt.Errorf("%w: --max-per-host (%d) must not be negative (0 = no bound)", errInvalidConfig, o.MaxPerHost)
	case o.PollTimeout < minPollTimeout || o.PollTimeout > maxPollTimeout:
		return httpOptions{}, fmt.Errorf("%w: --poll-timeout (%v) must be from %v to %v", errInvalidConfig, o.PollTimeout, minPollTimeout, maxPollTimeout)
	}
	switch o.MaxRetryAfter = cmd.Duration("max-retry-after"); {
	case o.MaxRetryAfter < 0:
		return httpOptions{}, fmt.Errorf("%w: --max-retry-after (%v) must not be negative (0 ignores Retry-After)", errInvalidConfig, o.MaxRetryAfter)
	case o.MaxRetryAfter == 0:
		o.MaxRetryAfter = -1 // httppoll: negative ignores it
	}
	if o.ProfilesFile = cmd.String("profiles"); o.ProfilesFile != "" {
		ps, err := httppoll.LoadProfiles(o.ProfilesFile)
		if err != nil {
			return httpOptions{}, fmt.Errorf("%w: --profiles: %w", errInvalidConfig, err)
		}
		o.Profiles = ps
	}
	return o, nil
}

// withProfileLabels adds the label profile/<name>=yes of each profile to
// labels, by which the worker announces its profiles in its heartbeat.
func withProfileLabels(labels nodes.Labels, profiles map[string]httppoll.Profile) (nodes.Labels, error) {
	if len(profiles) == 0 {
		return labels, nil
	}
	out := maps.Clone(labels)
	if out == nil {
		out = nodes.Labels{}
	}
	for name := range profiles {
		out[httppoll.ProfileLabel(name)] = httppoll.ProfileLabelValue
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("%w: --profiles: each profile is announced as a label profile/<name>=yes, and with --labels: %w", errInvalidConfig, err)
	}
	return out, nil
}

// parseRecording validates the recording flags of cmd. Each error names
// the flag and its rule.
func parseRecording(cmd *cli.Command) (recording, error) {
	mode, err := results.ParseRecordMode(cmd.String("record"))
	if err != nil {
		return recording{}, fmt.Errorf("%w: --record %q must be all, changes or none", errInvalidConfig, cmd.String("record"))
	}
	rc := recording{Mode: mode, MaxLen: int64(cmd.Int("record-maxlen")), Flush: cmd.Duration("record-flush"),
		Queue: int(cmd.Int("record-queue")), Body: int(cmd.Int("record-body"))}
	switch {
	case rc.MaxLen < 1 || rc.MaxLen > maxRecordLen:
		return recording{}, fmt.Errorf("%w: --record-maxlen (%d) must be from 1 to %d", errInvalidConfig, rc.MaxLen, maxRecordLen)
	case rc.Flush < minRecordFlush || rc.Flush > maxRecordFlush:
		return recording{}, fmt.Errorf("%w: --record-flush (%v) must be from %v to %v", errInvalidConfig, rc.Flush, minRecordFlush, maxRecordFlush)
	case rc.Queue < 1 || rc.Queue > maxRecordQueue:
		return recording{}, fmt.Errorf("%w: --record-queue (%d) must be from 1 to %d", errInvalidConfig, rc.Queue, maxRecordQueue)
	case rc.Body < 0 || rc.Body > httppoll.MaxBodyBytes:
		return recording{}, fmt.Errorf("%w: --record-body (%d) must be from 0 to %d", errInvalidConfig, rc.Body, httppoll.MaxBodyBytes)
	}
	return rc, nil
}

// newHTTPPoller builds the HTTP poller, which tells failures the outcome
// of its polls, and, unless --record none, its
// Recorder on a Redis client of its own, and starts the Recorder. stop
// stops the Recorder, flushing what is left (within twice its flush
// timeout), and closes its client; call it after the coordinator's drain.
// It may be called more than once.
//
// The recording client has its own small pool (recordPoolSize connections
// per master), so that result writes never hold a connection the
// coordinator's heartbeat, renewals and rounds wait for.
func newHTTPPoller(cfg workerConfig, rc recording, failures httppoll.FailureTracker, log *zap.Logger) (*httppoll.Poller, *results.Recorder, func(), error) {
	hc := httppoll.Config{
		Keys:            cfg.Keys,
		Worker:          cfg.Poller.ID,
		UserAgent:       "pollworker/" + currentBuild().Version,
		Logger:          log,
		Record:          rc.Mode,
		RecordBody:      rc.Body,
		MaxPerHost:      zeroMeansOff(rc.HTTP.MaxPerHost),
		Timeout:         rc.HTTP.PollTimeout,
		IdleConnTimeout: time.Duration(zeroMeansOff(int64(rc.HTTP.IdleConnTimeout))),
		ErrorBackoff:    cfg.Poller.MaxErrorBackoff,
		Failures:        failures,
		Profiles:        rc.HTTP.Profiles,
		MaxRetryAfter:   rc.HTTP.MaxRetryAfter,
	}
	if rc.Mode == results.RecordNone {
		hp, err := httppoll.New(hc)
		return hp, nil, func() {}, err
	}
	client := cfg.newClientNamed(cfg.Redis.ClientName+":results", recordPoolSize)
	rec, err := results.NewRecorder(results.RecorderConfig{
		Client:        client,
		Keys:          cfg.Keys,
		Sharded:       cfg.Cluster,
		MaxLen:        rc.MaxLen,
		QueueSize:     rc.Queue,
		FlushInterval: rc.Flush,
		Logger:        log.With(zap.String("worker", cfg.Poller.ID)),
	})
	if err != nil {
		_ = client.Close()
		return nil, nil, nil, err
	}
	hc.Recorder = rec
	hp, err := httppoll.New(hc)
	if err != nil {
		_ = client.Close()
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rec.Run(ctx) // the only error is a second Run
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
		st := rec.Stats()
		log.Info("results recorder stopped", zap.String("worker", cfg.Poller.ID),
			zap.Uint64("written", st.Written), zap.Uint64("dropped", st.Dropped), zap.Uint64("failed", st.Failed),
			zap.Uint64("unchanged", st.Unchanged), zap.Uint64("flushes", st.Flushes))
		_ = client.Close()
	})
	return hp, rec, stop, nil
}

// recorderMetrics exports the result recorder's counters.
func recorderMetrics(rec *results.Recorder) []prometheus.Collector {
	counter := func(name, help string, v func(results.RecorderStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(rec.Stats())) })
	}
	return []prometheus.Collector{
		counter("pollworker_results_written_total", "Poll results written to the result streams.",
			func(s results.RecorderStats) uint64 { return s.Written }),
		counter("pollworker_results_dropped_total", "Poll results dropped, oldest first, from a full queue because Redis was slower than the polls.",
			func(s results.RecorderStats) uint64 { return s.Dropped }),
		counter("pollworker_results_failed_total", "Poll results in a flush Redis did not take (not retried).",
			func(s results.RecorderStats) uint64 { return s.Failed }),
		counter("pollworker_results_unchanged_total", "Poll results not recorded because they repeated the session's last one (--record changes).",
			func(s results.RecorderStats) uint64 { return s.Unchanged }),
		counter("pollworker_results_flushes_total", "Pipelined writes of queued poll results.",
			func(s results.RecorderStats) uint64 { return s.Flushes }),
	}
}

// httpPollMetrics exports the HTTP poller's counters, every label at 0
// from the start.
func httpPollMetrics(hp *httppoll.Poller) []prometheus.Collector {
	counter := func(name, help string, labels prometheus.Labels, v func(httppoll.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v(hp.Stats())) })
	}
	var out []prometheus.Collector
	for _, o := range httppoll.Outcomes() {
		out = append(out, counter("pollworker_http_polls_total",
			"HTTP polls by outcome: ok (a response below 400 but 304), not_modified (304), client_error (4xx), server_error (5xx), timeout, error (no response), cancelled (the lease ended), profile_error (not sent: the session's profile is unknown here or a file of it unreadable); a 4xx or 5xx the session does not --expect is a failure.",
			prometheus.Labels{"outcome": o.String()}, func(s httppoll.Stats) uint64 { return s.Polls[o] }))
	}
	for _, r := range []struct {
		result string
		v      func(httppoll.Stats) uint64
	}{
		{"saved", func(s httppoll.Stats) uint64 { return s.StateSaves }},
		{"stale", func(s httppoll.Stats) uint64 { return s.StateStale }},
		{"too_large", func(s httppoll.Stats) uint64 { return s.StateTooLarge }},
		{"failed", func(s httppoll.Stats) uint64 { return s.StateFailed }},
	} {
		out = append(out, counter("pollworker_http_state_saves_total",
			"Saves of the HTTP poller's session state by result: saved, stale (the lease had moved on), too_large, failed (Redis); none is retried.",
			prometheus.Labels{"result": r.result}, r.v))
	}
	return append(out,
		counter("pollworker_http_changes_total", "HTTP polls whose status, error class or 2xx body differed from the session's saved state.",
			nil, func(s httppoll.Stats) uint64 { return s.Changes }),
		counter("pollworker_http_throttled_total", "HTTP polls answered 429 or 503 with a Retry-After that moved the session's next poll (--max-retry-after).",
			nil, func(s httppoll.Stats) uint64 { return s.Throttled }))
}

// pollMetrics exports the poll scheduler's figures: a worker whose late
// polls keep growing cannot keep up with its share.
func pollMetrics(c *poller.Coordinator) []prometheus.Collector {
	gauge := func(name, help string, v func(poller.PollStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(c.PollStats()) })
	}
	counter := func(name, help string, v func(poller.PollStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return v(c.PollStats()) })
	}
	return []prometheus.Collector{
		gauge("pollworker_polls_running", "Polls running now (at most pollworker_polls_limit).",
			func(s poller.PollStats) float64 { return float64(s.Running) }),
		gauge("pollworker_polls_limit", "Polls that may run at once now: --max-polls, lower while the CPU is the bound (more goroutines ready to run than processors), so that due polls wait in order of due time.",
			func(s poller.PollStats) float64 { return float64(s.PollLimit) }),
		gauge("pollworker_polls_waiting", "Due polls waiting for a slot (pollworker_polls_limit, or their host's --max-per-host).",
			func(s poller.PollStats) float64 { return float64(s.Waiting) }),
		counter("pollworker_polls_deferred_total", "Polls that waited for a slot.",
			func(s poller.PollStats) float64 { return float64(s.Deferred) }),
		counter("pollworker_http_host_waits_total", "HTTP polls that waited for a slot of their host (--max-per-host), counted by the scheduler that holds them (also in pollworker_polls_deferred_total).",
			func(s poller.PollStats) float64 { return float64(s.GroupWaits) }),
		counter("pollworker_polls_late_total", "Polls that started later than a tenth of their interval after they were due.",
			func(s poller.PollStats) float64 { return float64(s.Late) }),
		counter("pollworker_stalls_total", "Times this worker found itself stopped or starved (a poll's timer firing more than 750 ms late) and held its polls until it had read the sessions again.",
			func(s poller.PollStats) float64 { return float64(s.Stalls) }),
		gauge("pollworker_sessions_backoff", "Sessions polled less often after failed polls (--error-backoff).",
			func(s poller.PollStats) float64 { return float64(s.Backoff) }),
		gauge("pollworker_planned_weight", "The weight this worker's heartbeat carries, which its peers plan with: --weight, lower while it sheds load after staying behind (--shed-when-behind).",
			func(s poller.PollStats) float64 { return s.PlannedWeight }),
		gauge("pollworker_behind", "1 while this worker cannot keep up with its share: over the last 4 s it ran fewer than 90 % of the polls its sessions were due (until 95 %), or a poll waited for a slot longer than max(1s, its interval); pollworker_behind_reason says why.",
			func(s poller.PollStats) float64 {
				if s.Behind {
					return 1
				}
				return 0
			}),
		gauge("pollworker_polls_due_per_second", "Polls per second the held sessions were due over the last 4 s (see pollworker_polls_achieved_per_second).",
			func(s poller.PollStats) float64 { return s.DueRate }),
		gauge("pollworker_polls_achieved_per_second", "Polls per second run over the last 4 s.",
			func(s poller.PollStats) float64 { return s.AchievedRate }),
		counter("pollworker_polls_skipped_total", "Polls not sent for want of a local resource (no slot of the host within the wait allowed): not failures.",
			func(s poller.PollStats) float64 { return float64(s.Skipped) }),
		behindReasonMetric{c},
	}
}

// behindReasonMetric exports pollworker_behind_reason: 1, labelled with
// the reason (host-limit, max-polls, cpu) and the host for host-limit,
// while the worker is behind; absent while it keeps up.
type behindReasonMetric struct{ c *poller.Coordinator }

var behindReasonDesc = prometheus.NewDesc("pollworker_behind_reason",
	"1 while this worker is behind, labelled with why: reason host-limit (with the host whose --max-per-host bound most polls wait for), max-polls (--max-polls) or cpu (polls start late without waiting for a slot, or wait for pollworker_polls_limit lowered while the CPU is the bound).",
	[]string{"reason", "host"}, nil)

// Describe implements prometheus.Collector.
func (m behindReasonMetric) Describe(ch chan<- *prometheus.Desc) { ch <- behindReasonDesc }

// Collect implements prometheus.Collector.
func (m behindReasonMetric) Collect(ch chan<- prometheus.Metric) {
	if s := m.c.PollStats(); s.Behind {
		ch <- prometheus.MustNewConstMetric(behindReasonDesc, prometheus.GaugeValue, 1, s.BehindReason, s.BehindHost)
	}
}
