package kube

import "github.com/gpuslice/gpuslice/internal/e2e"

// Tools runs nri-plugin/e2e/kube-tools.sh (once per test process) and
// returns the directory of etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl; the CNI plugins are in the
// directory "cni" beside it.
func Tools() (string, error) {
	return e2e.BuildTools("kube-tools.sh", toolsTimeout, "kubelet", "../cni/bridge")
}
