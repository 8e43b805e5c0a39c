package kube

import (
	"sync"

	"github.com/gpuslice/gpuslice/internal/e2e"
)

var tools struct {
	once sync.Once
	bin  string
	err  error
}

// Tools runs nri-plugin/e2e/kube-tools.sh once per test process and returns
// the directory of etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl; the CNI plugins are in the
// directory "cni" beside it.
func Tools() (string, error) {
	tools.once.Do(func() {
		tools.bin, tools.err = e2e.BuildTools("kube-tools.sh", toolsTimeout, "kubelet", "../cni/bridge")
	})
	return tools.bin, tools.err
}
