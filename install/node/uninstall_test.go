package node

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/state"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// serveStatus answers GET /v1/status on the unix socket sock with node,
// as the agent's status socket does.
func serveStatus(t *testing.T, sock string, node *status.Node) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(node)
	}), ReadHeaderTimeout: time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// TestUninstallRefusesInUse: vGPUs in use (by the running agent's word,
// or its state when it is down) stop the uninstall, which names their
// containers; FORCE goes on.
func TestUninstallRefusesInUse(t *testing.T) {
	cfg := config.Default()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dest string)
		names []string
	}{{
		name: "the agent is down: its state",
		setup: func(t *testing.T, dest string) {
			s, err := state.Open(filepath.Join(dest, cfg.StateDir))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, a := range []state.Allocation{
				{Container: "c1", Namespace: "ml", Pod: "train", Name: "main", VGPUs: []state.VGPU{{MemoryBytes: 1 << 30, KmodID: -1}}},
				{Container: "0123456789abcdef", VGPUs: []state.VGPU{{MemoryBytes: 1 << 30, KmodID: -1}}},
			} {
				if err := s.Put(a); err != nil {
					t.Fatal(err)
				}
			}
		},
		names: []string{"ml/train/main", "id:0123456789ab"},
	}, {
		name: "the agent answers on its status socket",
		setup: func(t *testing.T, dest string) {
			serveStatus(t, filepath.Join(dest, cfg.StatusSocket), &status.Node{Cards: []status.Card{
				{VGPUs: []status.VGPU{{Namespace: "web", Pod: "render-0", Container: "main"}}},
			}})
		},
		names: []string{"web/render-0/main"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// A short root: a unix socket's path has at most 107 bytes.
			dest, err := os.MkdirTemp("", "gsu")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dest) })
			o := options(dest, nil)
			o.ContainerdMajor = 2
			install(t, o)
			tc.setup(t, dest)

			err = Uninstall(o)
			if err == nil || !strings.Contains(err.Error(), "refusing to uninstall") || !strings.Contains(err.Error(), "FORCE=1") {
				t.Fatalf("uninstall with vGPUs in use: %v", err)
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("the refusal does not name %s: %v", n, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dest, UnitPath)); err != nil {
				t.Errorf("the refused uninstall removed files: %v", err)
			}

			o.Force = true
			report := uninstall(t, o)
			if !strings.Contains(report, "FORCE") || !strings.Contains(report, tc.names[0]) {
				t.Errorf("the forced uninstall does not say what it overrode:\n%s", report)
			}
			if _, err := os.Stat(filepath.Join(dest, UnitPath)); err == nil {
				t.Errorf("the forced uninstall left the unit")
			}
		})
	}
}
