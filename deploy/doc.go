// Package deploy holds the deployment files (the Helm chart in helm/, raw
// Kubernetes manifests, a Dockerfile, a Grafana dashboard, and in tools/ a
// module of its own with the chart checker and the daemonless image
// builder) and the tests that check them: the manifests and the dashboard
// offline, the chart linted and rendered with Helm's code, the image built
// and taken apart.
package deploy
