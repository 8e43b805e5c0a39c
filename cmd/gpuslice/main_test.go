package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// runCmd runs the command line with env as the whole environment.
func runCmd(args []string, env map[string]string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func TestStatusCommand(t *testing.T) {
	node := nodes()["module"]
	sock := serve(t, agent(t, http.StatusOK, node))

	// The table, the socket from --socket.
	code, out, errOut := runCmd([]string{"status", "--socket", sock}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "module.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("status printed:\n%s\nwant:\n%s", out, want)
	}

	// --json, the socket from the environment: decodes back to the node.
	code, out, errOut = runCmd([]string{"status", "--json"}, map[string]string{SocketEnv: sock})
	if code != exitOK || errOut != "" {
		t.Fatalf("--json: exit %d, stderr %q", code, errOut)
	}
	var back status.Node
	if err := json.Unmarshal([]byte(out), &back); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	if !reflect.DeepEqual(&back, node) {
		t.Errorf("--json decoded %+v, want %+v", back, *node)
	}
}

func TestStatusCommandAgentDown(t *testing.T) {
	missing := filepath.Join(socketDir(t), "agent.sock")
	code, out, errOut := runCmd([]string{"status", "--socket", missing, "--timeout", "1s"}, nil)
	if code != exitFailure || out != "" {
		t.Errorf("exit %d, stdout %q; want %d and nothing", code, out, exitFailure)
	}
	want := "gpuslice: no agent socket at " + missing + ": is gpuslice-nri running? (systemctl status gpuslice-nri); if its statusSocket is elsewhere, pass --socket PATH (env GPUSLICE_SOCKET)\n"
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}

	// The default socket names the default path (absent on test machines
	// unless an agent runs there: then the test says nothing about it).
	if _, err := os.Stat(DefaultSocket); err == nil {
		t.Skipf("%s exists", DefaultSocket)
	}
	code, _, errOut = runCmd([]string{"status"}, nil)
	if code != exitFailure || !strings.Contains(errOut, "no agent socket at "+DefaultSocket) {
		t.Errorf("default socket: exit %d, stderr %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--bogus"},
		{"status", "extra"},
		{"status", "--timeout", "soon"},
		{"status", "--timeout", "0s"},
		{"frobnicate"},
		{"version", "x"},
		{"install-shim", "only-src"},
		{"install-shim", "a", "b", "c"},
	} {
		code, out, errOut := runCmd(args, nil)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "gpuslice: ") ||
			!strings.Contains(errOut, "gpuslice --help") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and a message", args, code, out, errOut, exitUsage)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runCmd([]string{"version"}, nil)
	if code != exitOK || !strings.HasPrefix(out, "gpuslice ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	version = "v9.9.9"
	t.Cleanup(func() { version = "" })
	if _, out, _ = runCmd([]string{"version"}, nil); !strings.HasPrefix(out, "gpuslice v9.9.9") {
		t.Errorf("version with -X: %q", out)
	}
	code, out, _ = runCmd([]string{"status", "--help"}, map[string]string{SocketEnv: "/tmp/x.sock"})
	if code != exitOK {
		t.Errorf("status --help: exit %d", code)
	}
	for _, w := range []string{"--socket", `(default "/tmp/x.sock")`, "--json", "--timeout", "GPUSLICE_SOCKET"} {
		if !strings.Contains(out, w) {
			t.Errorf("status --help lacks %q:\n%s", w, out)
		}
	}
}

func TestInstallShim(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "build.so"), filepath.Join(dir, "lib", "libgpuslice.so")
	if err := os.WriteFile(src, []byte("shim v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd([]string{"install-shim", src, dst}, nil)
	if code != exitOK || errOut != "" || out != "installed "+src+" as "+dst+" (by rename)\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("installed shim: %v, %v; want mode 0444", fi, err)
	}

	// A missing source is the work's failure (1), named, dst untouched.
	code, out, errOut = runCmd([]string{"install-shim", filepath.Join(dir, "absent.so"), dst}, nil)
	if code != exitFailure || out != "" || !strings.Contains(errOut, "absent.so") {
		t.Errorf("missing source: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, _ := os.ReadFile(dst); string(got) != "shim v2" {
		t.Errorf("dst after a failed install: %q", got)
	}
}
