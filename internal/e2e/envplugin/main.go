// Command envplugin is the NRI plugin internal/e2e's own test runs to prove
// that containerd really calls NRI plugins: on CreateContainer it adds
// E2E_NRI=1 and E2E_NRI_PLUGIN=<idx-name> to the container's environment,
// and it refuses containers of pods annotated e2e/reject, with the
// annotation's value in the error.
//
// Started by hand (external plugin) it dials -socket as -idx/-name; started
// by containerd from its plugin_path (a binary named NN-name) it takes its
// connection, name and index from the environment containerd sets.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// RejectAnnotation is the pod annotation that makes CreateContainer fail.
const RejectAnnotation = "e2e/reject"

type plugin struct{ name string }

// CreateContainer adjusts or refuses one container.
func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if why, ok := pod.GetAnnotations()[RejectAnnotation]; ok {
		return nil, nil, fmt.Errorf("envplugin rejects container %q of pod %q: %s",
			ctr.GetName(), pod.GetName(), why)
	}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("E2E_NRI", "1")
	adj.AddEnv("E2E_NRI_PLUGIN", p.name)
	return adj, nil, nil
}

func main() {
	socket := flag.String("socket", "", "NRI socket to dial (external plugin)")
	name := flag.String("name", "envplugin", "plugin name (external plugin)")
	idx := flag.String("idx", "10", "plugin index (external plugin)")
	flag.Parse()

	var opts []stub.Option
	p := &plugin{name: os.Getenv(api.PluginIdxEnvVar) + "-" + os.Getenv(api.PluginNameEnvVar)}
	if os.Getenv(api.PluginSocketEnvVar) == "" {
		// Not started by containerd: say who we are and where to dial.
		opts = append(opts, stub.WithPluginName(*name), stub.WithPluginIdx(*idx))
		if *socket != "" {
			opts = append(opts, stub.WithSocketPath(*socket))
		}
		p.name = *idx + "-" + *name
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		log.Fatalf("envplugin: %v", err)
	}
	if err := s.Run(context.Background()); err != nil {
		log.Fatalf("envplugin: %v", err)
	}
}
