// Command gpuslice is the node's command-line tool: `gpuslice status`
// prints the vGPU picture the node agent (gpuslice-nri) reports over its
// local socket, per card, as a table or as JSON (see README.md).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/gpuslice/gpuslice/pkg/shimfile"
	"github.com/spf13/cobra"
)

// DefaultSocket is where gpuslice-nri serves its status API.
const DefaultSocket = "/run/gpuslice/agent.sock"

// SocketEnv, when set, replaces DefaultSocket as --socket's default.
const SocketEnv = "GPUSLICE_SOCKET"

// version is the release, set at build time with
// -ldflags "-X main.version=v1.2.3"; empty: the module's build information.
var version string

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// Exit codes: 0 done; 1 the agent could not be reached, answered badly, the
// shim could not be installed, or the output could not be written; 2 the
// command line is wrong.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// failure marks an error of the work itself (exit 1); every other error
// the command tree returns is a usage error (exit 2).
type failure struct{ err error }

func (f failure) Error() string { return f.err.Error() }
func (f failure) Unwrap() error { return f.err }

// run executes the command line args and returns the exit code; getenv
// reads the environment (os.Getenv, or a map in tests).
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRoot(stdout, stderr, getenv)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "gpuslice: "+err.Error())
	var f failure
	if errors.As(err, &f) {
		return exitFailure
	}
	fmt.Fprintln(stderr, "run 'gpuslice --help' for usage")
	return exitUsage
}

// newRoot builds the command tree: gpuslice status, gpuslice install-shim,
// gpuslice version.
func newRoot(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuslice",
		Short:         "Inspect gpuslice, the GPU-sharing node agent, on this node",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newStatus(stdout, getenv), newInstallShim(stdout), newVersion(stdout))
	return root
}

// newStatus is `gpuslice status`.
func newStatus(stdout io.Writer, getenv func(string) string) *cobra.Command {
	socket := DefaultSocket
	if s := getenv(SocketEnv); s != "" {
		socket = s
	}
	var asJSON bool
	timeout := 3 * time.Second
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the node's cards and vGPUs as the agent reports them",
		Long: "Print the node's cards and vGPUs as the node agent (gpuslice-nri) reports\n" +
			"them over its local socket: per card its model, policy, enforcement,\n" +
			"health, memory and utilization, then each vGPU with its container,\n" +
			"memory used and cap, compute quota and measured use. A \"-\" is a figure\n" +
			"the agent could not read; the reasons are printed as warnings at the end.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v: want a positive duration such as 3s", timeout)
			}
			node, err := fetch(cmd.Context(), socket, timeout)
			if err != nil {
				return failure{err}
			}
			if asJSON {
				err = renderJSON(stdout, node)
			} else {
				err = render(stdout, node)
			}
			if err != nil {
				return failure{fmt.Errorf("writing the output: %w", err)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&socket, "socket", socket, "the agent's status socket (env "+SocketEnv+")")
	f.BoolVar(&asJSON, "json", false, "print the agent's report as JSON (missing figures are null)")
	f.DurationVar(&timeout, "timeout", timeout, "give up on the agent after this long")
	return cmd
}

// newInstallShim is `gpuslice install-shim SRC DST`: the agent's pod (an
// init container) and `make install` copy the shim to the host with it,
// by rename, so that containers running with the old shim keep it.
func newInstallShim(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "install-shim SRC DST",
		Short: "Copy the shim to DST by rename (running containers keep the old one)",
		Long: "Copy the shim SRC to DST without touching the file DST names now: a new\n" +
			"file is written beside DST (read-only, owned by root when run as root),\n" +
			"synced and renamed over DST. Processes that have the old shim mapped keep\n" +
			"it; the next process that loads DST gets the new one.",
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := shimfile.Replace(args[0], args[1]); err != nil {
				return failure{err}
			}
			if _, err := fmt.Fprintf(stdout, "installed %s as %s (by rename)\n", args[0], args[1]); err != nil {
				return failure{err}
			}
			return nil
		},
	}
}

// newVersion is `gpuslice version`.
func newVersion(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gpuslice's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if _, err := fmt.Fprintln(stdout, versionLine()); err != nil {
				return failure{err}
			}
			return nil
		},
	}
}

// versionLine is "gpuslice VERSION (REVISION) GOVERSION OS/ARCH", from
// the -X version, else the build information Go records.
func versionLine() string {
	v, rev := version, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " (" + s.Value[:12] + ")"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("gpuslice %s%s %s %s/%s", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
