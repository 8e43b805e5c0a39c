// Command gpuslice-install is what `make install` and `make uninstall`
// run (install/node does the work):
//
//	gpuslice-install install   [-destdir DIR] [-prefix /usr/local] [-source .] [-build build] ...
//	gpuslice-install uninstall [-destdir DIR] [-force]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpuslice/gpuslice/install/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line: 0 done, 1 failed, 2 a wrong command line.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall") {
		fmt.Fprintln(stderr, "usage: gpuslice-install install|uninstall [flags] (-h for the flags)")
		return 2
	}
	fs := flag.NewFlagSet("gpuslice-install "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := node.Options{Out: stdout}
	fs.StringVar(&o.DestDir, "destdir", "", "install into this scratch root, leaving the running system alone (make's DESTDIR)")
	fs.StringVar(&o.Prefix, "prefix", "/usr/local", "binaries go to PREFIX/bin (make's PREFIX)")
	fs.StringVar(&o.Source, "source", ".", "the gpuslice repository (install/, kmod/)")
	fs.StringVar(&o.Build, "build", "build", "the build directory (bin/, lib/)")
	fs.StringVar(&o.ContainerdConfig, "containerd-config", node.ContainerdToml, "containerd's main config (a path on the node)")
	fs.IntVar(&o.ContainerdMajor, "containerd-version", 0, "containerd's major version, 1 or 2 (0: containerd --version; unknown in -destdir)")
	fs.BoolVar(&o.NoModule, "no-module", false, "install without the kernel module (enforcement: file; make's NO_MODULE=1)")
	fs.BoolVar(&o.Force, "force", false, "uninstall although vGPUs are in use (make's FORCE=1)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "gpuslice-install: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.ContainerdMajor != 0 && o.ContainerdMajor != 1 && o.ContainerdMajor != 2 {
		fmt.Fprintf(stderr, "gpuslice-install: -containerd-version %d: want 1, 2 or 0 (ask containerd)\n", o.ContainerdMajor)
		return 2
	}
	do := node.Install
	if args[0] == "uninstall" {
		do = node.Uninstall
	}
	if err := do(o); err != nil {
		fmt.Fprintln(stderr, "gpuslice-install: "+err.Error())
		return 1
	}
	return 0
}
