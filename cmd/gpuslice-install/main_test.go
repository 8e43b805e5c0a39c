package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: gpuslice-install install|uninstall"},
		{[]string{"frobnicate"}, "usage: gpuslice-install install|uninstall"},
		{[]string{"install", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"install", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"install", "-containerd-version", "3"}, "-containerd-version 3: want 1, 2 or 0"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// A failure of the work is exit 1, with the installer's message.
func TestFailure(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"install", "-destdir", t.TempDir(), "-build", t.TempDir(), "-source", t.TempDir()}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "run make build first") {
		t.Errorf("install without a build: exit %d, stderr %q", code, errOut.String())
	}
	code = run([]string{"install", "-destdir", "relative/dir"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), `DESTDIR "relative/dir": want an absolute path`) {
		t.Errorf("a relative DESTDIR: exit %d, stderr %q", code, errOut.String())
	}
}
