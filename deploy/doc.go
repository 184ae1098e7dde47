// Package deploy holds the deployment files (Kubernetes manifests, a
// Dockerfile) and a test that checks them offline.
package deploy
