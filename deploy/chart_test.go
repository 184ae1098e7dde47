package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chartDir is the Helm chart, relative to this package.
const chartDir = "helm/pollworker"

// chartTool runs the chartcheck tool (Helm's own lint and template code).
type chartTool struct{ bin string }

// run runs chartcheck with args, returning its combined output.
func (c chartTool) run(args ...string) (string, error) {
	out, err := exec.Command(c.bin, args...).CombinedOutput()
	return string(out), err
}

// valuesArgs are the -f flags of the values files, relative to the chart.
func valuesArgs(files []string) []string {
	var out []string
	for _, f := range files {
		out = append(out, "-f", filepath.Join(chartDir, f))
	}
	return out
}

// render lints the chart (strictly: a warning fails too) and renders it
// with the values files, as `helm lint --strict` and `helm template` do,
// and returns the rendered objects by kind.
func (c chartTool) render(t *testing.T, namespace string, values ...string) map[string]map[string]any {
	t.Helper()
	out, err := c.run(append([]string{"lint", chartDir, "--strict"}, valuesArgs(values)...)...)
	require.NoError(t, err, "helm lint: %s", out)
	require.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
	out, err = c.run(append([]string{"template", chartDir, "--namespace", namespace, "--release", "prod"}, valuesArgs(values)...)...)
	require.NoError(t, err, "helm template: %s", out)
	docs := map[string]map[string]any{}
	decodeDocs(t, "helm template", []byte(out), docs)
	return docs
}

// exportedMetricNames are the metric names the worker exports: the
// string literals pollworker_… of the metrics package and cmd/pollworker
// (which registers the poll scheduler's gauges itself).
func exportedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	nameRe := regexp.MustCompile(`^pollworker_[a-z_]+$`)
	for _, dir := range []string{"../metrics", "../cmd/pollworker"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			require.NoError(t, err)
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && nameRe.MatchString(s) {
						names[s] = true
					}
				}
				return true
			})
		}
	}
	for _, n := range []string{"pollworker_polls_running", "pollworker_polls_waiting", "pollworker_behind"} {
		require.True(t, names[n], "the scan of the sources missed %s", n)
	}
	return names
}

// requireKnownMetrics checks that a PromQL query or metric name names only
// metrics the worker exports.
func requireKnownMetrics(t *testing.T, known map[string]bool, what, query string) {
	t.Helper()
	found := regexp.MustCompile(`pollworker_[a-z_]+`).FindAllString(query, -1)
	require.NotEmpty(t, found, "%s names no pollworker metric: %s", what, query)
	for _, n := range found {
		require.True(t, known[n], "%s uses %s, which the worker does not export", what, n)
	}
}

// strs is a decoded YAML list of strings.
func strs(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestHelmChart lints and renders the chart with Helm's own code (the
// chartcheck tool) for the default values and for values that switch on
// every part, and checks the rendered objects: the raw manifests'
// invariants (ports, probes, grace period over preStop + drain, the
// Redis URL from a Secret, the PodDisruptionBudget), flags and environment
// variables that the binary accepts, sessions applied from the ConfigMap
// by a hook Job and a CronJob, the profiles Secret mounted where --profiles
// points, and autoscalers on metrics the worker exports.
func TestHelmChart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: building Helm's lint and template code costs about 3 minutes of CPU on an empty build cache")
	}
	tool := chartTool{buildTool(t, "chartcheck")}
	pw := buildPollworker(t)
	runCLI := surfaceOf(t, pw, "run")
	applyCLI := surfaceOf(t, pw, "sessions", "apply")
	metricNames := exportedMetricNames(t)
	raw := load(t)

	workerOf := func(t *testing.T, docs map[string]map[string]any) map[string]any {
		c := checkWorkers(t, docs)
		requireAccepts(t, runCLI, "the worker", strs(t, c["args"]), keys(envOf(t, c)))
		return c
	}

	t.Run("default values", func(t *testing.T) {
		docs := tool.render(t, "default")
		require.ElementsMatch(t, []string{"Deployment", "PodDisruptionBudget", "Service"}, keys(docs))
		c := workerOf(t, docs)
		require.Equal(t, []any{"run"}, c["args"], "no --profiles without profiles.existingSecret")
		require.NotContains(t, c, "volumeMounts")

		// As the raw manifests: the same Secret, timings, port and grace.
		rawC := at(t, raw["Deployment"], "spec", "template", "spec", "containers", 0)
		env, rawEnv := envOf(t, c), envOf(t, rawC)
		for _, name := range []string{"POLLWORKER_REDIS_URL", "POLLWORKER_LEASE_TTL", "POLLWORKER_DRAIN_TIMEOUT", "POLLWORKER_HTTP_ADDR"} {
			require.Equal(t, rawEnv[name], env[name], name)
		}
		for _, path := range [][]any{
			{"spec", "replicas"},
			{"spec", "template", "spec", "terminationGracePeriodSeconds"},
			{"spec", "template", "spec", "containers", 0, "ports"},
			{"spec", "template", "spec", "containers", 0, "lifecycle"},
			{"spec", "template", "spec", "containers", 0, "resources"},
		} {
			require.Equal(t, at(t, raw["Deployment"], path...), at(t, docs["Deployment"], path...), "%v", path)
		}
		svc := docs["Service"]
		require.Equal(t, at(t, docs["Deployment"], "spec", "selector", "matchLabels"), at(t, svc, "spec", "selector"))
		require.Equal(t, "http", at(t, svc, "spec", "ports", 0, "targetPort"))
	})

	t.Run("every part on, KEDA", func(t *testing.T) {
		docs := tool.render(t, "polls", "ci/full-values.yaml")
		dep := docs["Deployment"]
		c := workerOf(t, docs)
		require.NotContains(t, dep["spec"], "replicas", "the ScaledObject owns the replica count")

		// The profiles file: mounted from its Secret where --profiles points.
		args := strs(t, c["args"])
		i := slices.Index(args, "--profiles")
		require.GreaterOrEqual(t, i, 0, "args %v", args)
		require.Equal(t, "/etc/pollworker/profiles/profiles.yaml", args[i+1])
		mount := at(t, c, "volumeMounts", 0)
		require.Equal(t, "/etc/pollworker/profiles", at(t, mount, "mountPath"))
		require.Equal(t, true, at(t, mount, "readOnly"))
		vol := at(t, dep, "spec", "template", "spec", "volumes", 0)
		require.Equal(t, at(t, mount, "name"), at(t, vol, "name"))
		require.Equal(t, "pollworker-profiles", at(t, vol, "secret", "secretName"))
		require.NotContains(t, at(t, vol, "secret"), "items", "the credential files the profiles name are keys of the same Secret")

		// The sessions: a hook Job after install and upgrade, and a CronJob.
		job := docs["Job"]
		require.Equal(t, "post-install,post-upgrade", at(t, job, "metadata", "annotations", "helm.sh/hook"))
		cron := docs["CronJob"]
		require.Equal(t, "Forbid", at(t, cron, "spec", "concurrencyPolicy"))
		for what, pod := range map[string]any{
			"the hook Job": at(t, job, "spec", "template"),
			"the CronJob":  at(t, cron, "spec", "jobTemplate", "spec", "template"),
		} {
			args := checkSessionsPod(t, docs, pod)
			require.Contains(t, args, "--prune", what)
			requireAccepts(t, applyCLI, what, strs(t, args), keys(envOf(t, at(t, pod, "spec", "containers", 0))))
		}

		// Autoscaling: KEDA on the Deployment, on metrics the worker exports.
		so := docs["ScaledObject"]
		require.Equal(t, at(t, dep, "metadata", "name"), at(t, so, "spec", "scaleTargetRef", "name"))
		require.Equal(t, 3, at(t, so, "spec", "minReplicaCount"))
		triggers := at(t, so, "spec", "triggers").([]any)
		require.Len(t, triggers, 2)
		for _, tr := range triggers {
			require.Equal(t, "prometheus", at(t, tr, "type"))
			requireKnownMetrics(t, metricNames, "ScaledObject trigger", at(t, tr, "metadata", "query").(string))
			require.Contains(t, at(t, tr, "metadata", "query"), `namespace="polls",service="prod-pollworker"`)
		}
		require.Equal(t, "140", at(t, triggers[0], "metadata", "threshold"), "70 % of --max-polls 200")

		// The ServiceMonitor scrapes the Service's port, which is the worker's.
		sm := docs["ServiceMonitor"]
		require.Equal(t, at(t, docs["Service"], "metadata", "labels", "app.kubernetes.io/name"),
			at(t, sm, "spec", "selector", "matchLabels", "app.kubernetes.io/name"))
		require.Equal(t, "http", at(t, sm, "spec", "endpoints", 0, "port"))
		require.Equal(t, "/metrics", at(t, sm, "spec", "endpoints", 0, "path"))
	})

	t.Run("HPA and a chart-made Secret", func(t *testing.T) {
		docs := tool.render(t, "default", "ci/hpa-values.yaml")
		c := workerOf(t, docs)
		secret := docs["Secret"]
		ref := at(t, envOf(t, c)["POLLWORKER_REDIS_URL"], "valueFrom", "secretKeyRef")
		require.Equal(t, at(t, secret, "metadata", "name"), at(t, ref, "name"))
		require.NotEmpty(t, at(t, secret, "stringData", at(t, ref, "key").(string)))
		hpa := docs["HorizontalPodAutoscaler"]
		require.Equal(t, at(t, docs["Deployment"], "metadata", "name"), at(t, hpa, "spec", "scaleTargetRef", "name"))
		for _, m := range at(t, hpa, "spec", "metrics").([]any) {
			requireKnownMetrics(t, metricNames, "HPA metric", at(t, m, "pods", "metric", "name").(string))
		}
	})

	// Values that would break the drain, the leases or the wiring are refused
	// by `helm template` (and so by install and upgrade), naming the rule.
	for _, tc := range []struct {
		name, values, want string
	}{
		{"grace below preStop + drain + 5s", "terminationGracePeriodSeconds: 17\n",
			"terminationGracePeriodSeconds (17) must be at least worker.preStopSeconds + worker.drainTimeoutSeconds + 5 (18)"},
		{"drain raised, grace not", "worker: {drainTimeoutSeconds: 60}\n", "must be at least"},
		{"no Redis", "redis: {existingSecret: \"\"}\n", "set redis.existingSecret"},
		{"unknown autoscaler (values.schema.json)", "autoscaling: {enabled: true, kind: vpa}\n", "at '/autoscaling/kind': value must be one of 'keda', 'hpa'"},
		{"misspelt key (values.schema.json)", "replicas: 3\n", "additional properties 'replicas' not allowed"},
		{"weight out of range (values.schema.json)", "worker: {weight: 0}\n", "at '/worker/weight'"},
		{"ServiceMonitor without Service", "serviceMonitor: {enabled: true}\nservice: {enabled: false}\n", "serviceMonitor.enabled needs service.enabled"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "values.yaml")
			require.NoError(t, os.WriteFile(f, []byte(tc.values), 0o644))
			out, err := tool.run("template", chartDir, "-f", f)
			require.Error(t, err, "rendered: %s", out)
			require.Contains(t, out, tc.want)
		})
	}
}

// keys are m's keys, in no order.
func keys[V any](m map[string]V) []string { return slices.Collect(maps.Keys(m)) }
