// Package install_test deploys gpuslice the way a cluster operator does,
// onto the real control plane of internal/kube: the image of
// install/image imported into the node's containerd, `helm install` of
// install/helm/gpuslice, the agent running as a pod of the chart's
// DaemonSet (on two simulated cards, no-module enforcement, a scratch
// device root), a pod with a vGPU claim and a pod in the reference's form
// run with their caps, `helm upgrade` to a second image with those pods
// running, and `helm uninstall`.
//
// The package has a cluster of its own (kube.Shared is per test binary,
// and one cluster runs on a machine at a time), so its agent, the
// DaemonSet's, is the node's only one: e2e/cluster's host-process agent
// runs on another cluster, before or after this one.
//
// The tests need root. They skip only when GPUSLICE_SKIP_KUBE=1 (or
// GPUSLICE_SKIP_E2E=1), or GPUSLICE_SKIP_HELM=1 for Helm.
package install_test

import (
	"os"
	"testing"

	"github.com/gpuslice/gpuslice/internal/kube"
)

// The node's card model, as the reference labels GPU nodes: the chart's
// DaemonSet runs where the label is.
const (
	modelLabel = "accelerator"
	model      = "nvidia-tesla-t4"
)

func TestMain(m *testing.M) {
	os.Exit(kube.Main(m, kube.Options{NodeLabels: map[string]string{modelLabel: model}}))
}
