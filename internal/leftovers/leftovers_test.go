package leftovers

import (
	"os/exec"
	"slices"
	"testing"
)

func TestSafeRoot(t *testing.T) {
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"", false}, {"/", false}, {"//", false}, {"/..", false},
		{"/gpuslice-e2e-1", true}, {"gpuslice-e2e-1", true}, {"/var/lib/gpuslice-kube/x", true},
	} {
		if got := safeRoot(tt.path); got != tt.want {
			t.Errorf("safeRoot(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\134backslash`, "/tab\tand\\backslash"},
		{`/trailing\04`, `/trailing\04`},
	} {
		if got := unescapeMount(tt.in); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestNothingMatchesTheRoot guards the sweeps: an empty or root path names
// no process, cgroup or mount (else a teardown would take the host's).
func TestNothingMatchesTheRoot(t *testing.T) {
	for _, p := range []string{"", "/"} {
		if got := PidsWithArgPrefix(p); got != nil {
			t.Errorf("PidsWithArgPrefix(%q) = %v", p, got)
		}
		if got := CgroupDirs(p); got != nil {
			t.Errorf("CgroupDirs(%q) = %v", p, got)
		}
		if got := MountsUnder(p); got != nil {
			t.Errorf("MountsUnder(%q) = %v", p, got)
		}
	}
}

func TestPidsWithArgPrefix(t *testing.T) {
	dir := t.TempDir()
	// A shell that keeps its arguments (no exec: a command follows).
	cmd := exec.Command("sh", "-c", "sleep 60; :", "sh", "--state="+dir+"/sub")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if got := PidsWithArgPrefix(dir); !slices.Contains(got, pid) {
		t.Errorf("PidsWithArgPrefix(%s) = %v, want %d among them", dir, got, pid)
	}
	if got := PidsWithArgPrefix(dir + "-other"); slices.Contains(got, pid) {
		t.Errorf("PidsWithArgPrefix(%s-other) = %v, has %d", dir, got, pid)
	}
}
