// Package cluster_test runs gpuslice on a real single-node Kubernetes
// (internal/kube): the node agent as the node's containerd NRI plugin and
// its DRA driver gpu.gpuslice.io, the admission webhook and the
// ValidatingAdmissionPolicies of install/kubernetes, with the released
// kube-scheduler placing vGPUs on two simulated 16 GiB cards. One control
// plane is shared by the scenarios, which run one after another, each in
// a namespace of its own that it leaves empty.
//
// The tests need root. They skip only when GPUSLICE_SKIP_KUBE=1 (or
// GPUSLICE_SKIP_E2E=1).
package cluster_test

import (
	"os"
	"testing"

	"github.com/gpuslice/gpuslice/internal/kube"
)

func TestMain(m *testing.M) {
	os.Exit(kube.Main(m, kube.Options{}))
}
