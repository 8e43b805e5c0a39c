package guard

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The checked-in guard_bpfel.{go,o} are what gen.go's go:generate line
// makes of bpf/ now, byte for byte (bpf2go maps the source directory out
// of the debug info, so the output does not depend on where the clone
// is). It needs clang-14, llvm-14 and libbpf-dev (make install-deps as
// root installs them); GPUSLICE_SKIP_BPF=1 skips it.
func TestGeneratedUpToDate(t *testing.T) {
	if os.Getenv("GPUSLICE_SKIP_BPF") == "1" {
		t.Skip("GPUSLICE_SKIP_BPF=1")
	}
	for _, tool := range []string{"clang-14", "llvm-strip-14"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: run make install-deps as root (Debian packages clang-14 llvm-14 libbpf-dev), "+
				"or set GPUSLICE_SKIP_BPF=1 to skip this check", tool)
		}
	}
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Fatalf("libbpf's headers are missing: run make install-deps as root (Debian package libbpf-dev), " +
			"or set GPUSLICE_SKIP_BPF=1 to skip this check")
	}
	src, err := os.ReadFile("gen.go")
	require.NoError(t, err)
	var line string
	for _, l := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(l, "//go:generate "); ok {
			line = rest
		}
	}
	require.NotEmpty(t, line, "gen.go has no go:generate line")
	args := splitQuoted(t, line)
	require.Equal(t, []string{"go", "tool", "bpf2go"}, args[:3])
	out := t.TempDir()
	// The flags go before bpf2go's positional arguments.
	cmd := exec.Command("go", append([]string{"tool", "bpf2go", "-output-dir", out}, args[3:]...)...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=guard")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "bpf2go: %s", b)
	for _, f := range []string{"guard_bpfel.go", "guard_bpfel.o"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		require.NoError(t, err)
		have, err := os.ReadFile(f)
		require.NoError(t, err)
		if !bytes.Equal(want, have) {
			t.Errorf("%s is not what bpf/ compiles to: run go generate ./pkg/guard and commit the result", f)
		}
	}
}

// splitQuoted splits a go:generate line into words, "..." quoting as go
// generate does.
func splitQuoted(t *testing.T, s string) []string {
	var words []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			require.GreaterOrEqual(t, end, 0, "unbalanced quote in %q", s)
			words = append(words, s[1:end+1])
			s = s[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(s, " ")
		words = append(words, w)
		s = rest
	}
	return words
}
