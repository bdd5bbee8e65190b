// Package helm holds the Helm chart of the shellbox server on Kubernetes
// (shellbox/, the kube backend) and its tests, which run helm's own lint
// and template (helm.sh/helm/v3 as a library, so `go test ./...` checks the
// chart with no helm binary) and assert on the rendered objects decoded as
// Kubernetes API types: the server pod meets the restricted Pod Security
// level, the Role grants exactly what kube calls, the probes, and
// the rendered configuration loads with package config into what the
// chart's other objects expect (namespace, release, server selector).
package helm
