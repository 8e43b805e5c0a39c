package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/config"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

// When the driver runs: never when off; with auto, only with credentials
// and a node name (else a log line); with on, a missing one is an error
// naming it.
func TestStartDRAWithout(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod
	t.Setenv("NODE_NAME", "")
	good := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(good, []byte(kubeconfig), 0o600))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name             string
		mode             config.DRAMode
		kubeconfig, node string
		want             string // the error; "" none
	}{
		{"off", config.DRAOff, good, "n", ""},
		{"auto without credentials", config.DRAAuto, "", "n", ""},
		{"auto without a node", config.DRAAuto, good, "", ""},
		{"on without credentials", config.DRAOn, "", "n", "dra: on, but no Kubernetes credentials: set kubeconfig"},
		{"on without a node", config.DRAOn, good, "", "dra: on, but no node name: set nodeName, or NODE_NAME"},
		{"on with a missing kubeconfig", config.DRAOn, "/nonexistent/kubeconfig", "n", "dra: on, but kubeconfig /nonexistent/kubeconfig:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.DRA, cfg.Kubeconfig, cfg.NodeName = tc.mode, tc.kubeconfig, tc.node
			d, err := startDRA(nil, &cfg, log)
			assert.Nil(t, d)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The kubeconfig named and the node's name, from the environment when
// the configuration gives none.
func TestKubeIdentity(t *testing.T) {
	t.Setenv("NODE_NAME", "node-from-env")
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfig), 0o600))
	cfg := config.Default()
	cfg.Kubeconfig = path
	rc, node, why := kubeIdentity(&cfg)
	require.Empty(t, why)
	assert.Equal(t, "https://127.0.0.1:1", rc.Host)
	assert.Equal(t, "t", rc.BearerToken)
	assert.Equal(t, "node-from-env", node)
}
