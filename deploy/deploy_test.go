package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/pollworker/pollworker/metrics"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// load decodes every YAML document of the manifests, keyed by kind.
func load(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]map[string]any{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		decodeDocs(t, f, raw, out)
	}
	return out
}

// decodeDocs decodes every YAML document of raw (from what) into out,
// keyed by kind; a kind seen twice fails the test.
func decodeDocs(t *testing.T, what string, raw []byte, out map[string]map[string]any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err, what)
		}
		if doc == nil { // an empty document
			continue
		}
		require.NotEmpty(t, doc["apiVersion"], what)
		kind, _ := doc["kind"].(string)
		require.NotEmpty(t, kind, what)
		require.NotContains(t, out, kind, "%s: two objects of kind %s", what, kind)
		out[kind] = doc
	}
}

// at walks a decoded document by keys and list indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "at %v: not a map", p)
			v = m[k]
		case int:
			l, ok := v.([]any)
			require.True(t, ok, "at %v: not a list", p)
			require.Greater(t, len(l), k)
			v = l[k]
		}
	}
	return v
}

func TestManifests(t *testing.T) {
	docs := load(t)
	c := checkWorkers(t, docs)
	require.Equal(t, []any{"run"}, at(t, c, "args"))
}

// checkWorkers checks the invariants of the workers' Deployment and its
// PodDisruptionBudget, the same for the raw manifests and for the chart's
// rendered objects, and returns the worker container.
func checkWorkers(t *testing.T, docs map[string]map[string]any) map[string]any {
	t.Helper()
	dep := docs["Deployment"]
	require.NotNil(t, dep)
	spec := at(t, dep, "spec", "template", "spec")
	c := at(t, spec, "containers", 0).(map[string]any)
	require.Equal(t, "run", at(t, c, "args", 0))

	env := envOf(t, c)
	// The Redis URL (with its password) comes from a Secret.
	require.NotNil(t, at(t, env["POLLWORKER_REDIS_URL"], "valueFrom", "secretKeyRef"))
	require.NotNil(t, at(t, env["POLLWORKER_ID"], "valueFrom", "fieldRef"), "each pod its own worker id")

	// The grace period covers the preStop pause plus the drain.
	drain, err := time.ParseDuration(env["POLLWORKER_DRAIN_TIMEOUT"]["value"].(string))
	require.NoError(t, err)
	preStop := at(t, c, "lifecycle", "preStop", "sleep", "seconds").(int)
	grace := at(t, spec, "terminationGracePeriodSeconds").(int)
	require.Greater(t, time.Duration(grace)*time.Second, time.Duration(preStop)*time.Second+drain+5*time.Second)

	// TTL at least 3 × renew, as the worker enforces (renew defaults to TTL/3).
	ttl, err := time.ParseDuration(env["POLLWORKER_LEASE_TTL"]["value"].(string))
	require.NoError(t, err)
	if r, ok := env["POLLWORKER_RENEW_INTERVAL"]; ok {
		renew, err := time.ParseDuration(r["value"].(string))
		require.NoError(t, err)
		require.GreaterOrEqual(t, ttl, 3*renew)
	}

	// The probes reach the port the worker serves HTTP on.
	addr := env["POLLWORKER_HTTP_ADDR"]["value"].(string)
	require.Equal(t, "http", at(t, c, "ports", 0, "name"))
	require.Equal(t, ":"+strconv.Itoa(at(t, c, "ports", 0, "containerPort").(int)), addr)
	require.Equal(t, "/healthz", at(t, c, "livenessProbe", "httpGet", "path"))
	require.Equal(t, "/readyz", at(t, c, "readinessProbe", "httpGet", "path"))
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		require.Equal(t, "http", at(t, c, probe, "httpGet", "port"), probe)
	}
	require.Equal(t, true, at(t, c, "securityContext", "readOnlyRootFilesystem"))
	require.Equal(t, false, at(t, c, "securityContext", "allowPrivilegeEscalation"))

	pdb := docs["PodDisruptionBudget"]
	require.NotNil(t, pdb)
	require.Equal(t, at(t, dep, "spec", "selector", "matchLabels"), at(t, pdb, "spec", "selector", "matchLabels"))
	require.Equal(t, 1, at(t, pdb, "spec", "maxUnavailable"))
	return c
}

// envOf is a container's environment by name.
func envOf(t *testing.T, c any) map[string]map[string]any {
	t.Helper()
	env := map[string]map[string]any{}
	for _, e := range at(t, c, "env").([]any) {
		m := e.(map[string]any)
		env[m["name"].(string)] = m
	}
	return env
}

// TestSessionsManifests: the ConfigMap holds a sessions file that
// `sessions apply` accepts, and the CronJob applies that file, from the
// worker's image with the worker's Redis Secret, one run at a time, in pods
// that the Deployment and the PodDisruptionBudget do not select.
func TestSessionsManifests(t *testing.T) {
	docs := load(t)
	cron := docs["CronJob"]
	require.NotNil(t, cron)
	require.Equal(t, "Forbid", at(t, cron, "spec", "concurrencyPolicy"))
	args := checkSessionsPod(t, docs, at(t, cron, "spec", "jobTemplate", "spec", "template"))
	require.NotContains(t, args, "--allow-empty", "an emptied ConfigMap must not wipe the fleet")
}

// checkSessionsPod checks a pod template that runs `sessions apply` on the
// ConfigMap's file, with the worker's image and Redis Secret, in pods that
// the Deployment does not select; it returns the container's args.
func checkSessionsPod(t *testing.T, docs map[string]map[string]any, pod any) []any {
	t.Helper()
	cm, dep := docs["ConfigMap"], docs["Deployment"]
	require.NotNil(t, cm)
	c := at(t, pod, "spec", "containers", 0)
	worker := at(t, dep, "spec", "template", "spec", "containers", 0)
	require.Equal(t, at(t, worker, "image"), at(t, c, "image"))

	args := at(t, c, "args").([]any)
	require.Equal(t, []any{"sessions", "apply", "-f"}, args[:3])
	require.NotContains(t, args, "--allow-empty", "an emptied ConfigMap must not wipe the fleet")
	mount := at(t, c, "volumeMounts", 0)
	dir, file := filepath.Split(args[3].(string))
	require.Equal(t, at(t, mount, "mountPath").(string)+"/", dir)
	vol := at(t, pod, "spec", "volumes", 0)
	require.Equal(t, at(t, mount, "name"), at(t, vol, "name"))
	require.Equal(t, at(t, cm, "metadata", "name"), at(t, vol, "configMap", "name"))

	sessionsFile, ok := at(t, cm, "data", file).(string)
	require.True(t, ok, "the ConfigMap has no key %s", file)
	entries, err := session.ParseFile([]byte(sessionsFile), session.HTTPURL)
	require.NoError(t, err)
	require.NotEmpty(t, entries)

	require.Equal(t, envOf(t, worker)["POLLWORKER_REDIS_URL"], envOf(t, c)["POLLWORKER_REDIS_URL"], "the worker's Redis URL, from its Secret")

	podLabels := at(t, pod, "metadata", "labels").(map[string]any)
	matches := true
	for k, v := range at(t, dep, "spec", "selector", "matchLabels").(map[string]any) {
		matches = matches && podLabels[k] == v
	}
	require.False(t, matches, "the Deployment must not select the apply pods")
	return args
}

func TestDockerfileBuildsTheBinary(t *testing.T) {
	raw, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	s := string(raw)
	require.Contains(t, s, "./cmd/pollworker")
	require.Contains(t, s, "-X main.version=")
	require.True(t, strings.Count(s, "FROM ") >= 2, "multi-stage")
}

// TestGrafanaDashboardUsesExportedMetrics checks that the dashboard is valid
// JSON and names only metrics that the metrics package exports.
func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("grafana/pollworker.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.Round(poller.RoundReport{Members: 1, Sessions: 1, Owned: 1, MembershipChanged: true}) // gauges and counters appear once set
	m.LeaseEvent(poller.Event{Type: poller.EventAcquired})
	m.PollDone(poller.PollReport{Duration: time.Millisecond, Outcome: "ok"})
	m.RenewCycle(poller.RenewReport{RoundTrip: time.Millisecond, Renewed: 1})
	m.RedisError("renew")
	families, err := reg.Gather()
	require.NoError(t, err)
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
	}
	name := regexp.MustCompile(`pollworker_[a-z_]+`)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				n = strings.TrimSuffix(n, "_bucket")
				require.True(t, known[n], "panel %q uses unknown metric %s", p.Title, n)
			}
		}
	}
}
