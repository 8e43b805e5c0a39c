package testenv

import (
	"fmt"
	"os/exec"
)

// GoBuild builds the main package pkg (a path from the repository root,
// "./nri-plugin") into the binary bin, for tests that run it as a
// process.
func GoBuild(pkg, bin string) error {
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s (go build %s): %v\n%s", bin, pkg, err, out)
	}
	return nil
}
