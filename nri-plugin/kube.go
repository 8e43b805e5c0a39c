package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/nri-plugin/dra"
	"github.com/gpuslice/gpuslice/pkg/config"
)

// startDRA starts the DRA driver beside the NRI plugin, over the same
// agent, as the configuration says: nil, nil when it does not run (off,
// or auto without Kubernetes credentials or a node name, which it logs).
func startDRA(a *agent.Agent, cfg *config.Config, log *slog.Logger) (*dra.Driver, error) {
	if cfg.DRA == config.DRAOff {
		return nil, nil
	}
	rc, node, why := kubeIdentity(cfg)
	if why != "" {
		if cfg.DRA == config.DRAOn {
			return nil, fmt.Errorf("dra: on, but %s", why)
		}
		log.Info("DRA driver off (dra: auto): "+why, "kubeconfig", cfg.Kubeconfig)
		return nil, nil
	}
	client, err := kubernetes.NewForConfig(rc)
	var d *dra.Driver
	if err == nil {
		d, err = dra.Start(context.Background(), dra.Options{Agent: a, NodeName: node, Client: client,
			KubeletRootDir: cfg.KubeletRootDir, CDIDir: cfg.DRACDIDir, Log: log})
	}
	if err != nil && cfg.DRA == config.DRAAuto {
		// Claims then find no driver on the node, and run nowhere; the
		// annotation route goes on.
		log.Error("DRA driver off (dra: auto): it cannot start", "error", err)
		return nil, nil
	}
	return d, err
}

// kubeIdentity finds the driver's credentials (the kubeconfig named, or
// the pod's in-cluster ones) and the node's name; why says what is
// missing.
func kubeIdentity(cfg *config.Config) (rc *rest.Config, node, why string) {
	node = cfg.NodeNameOrEnv()
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	switch {
	case errors.Is(err, rest.ErrNotInCluster):
		return nil, node, "no Kubernetes credentials: set kubeconfig (the node's own is the least privilege), or run the agent in a pod"
	case err != nil:
		return nil, node, fmt.Sprintf("kubeconfig %s: %v", cfg.Kubeconfig, err)
	case node == "":
		return nil, node, "no node name: set nodeName, or NODE_NAME in the environment"
	}
	rc.UserAgent = "gpuslice-nri"
	return rc, node, ""
}
