package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// fetch asks the agent listening on the unix socket for the node's status
// (status.Fetch). Its errors name the socket and say what to check.
func fetch(ctx context.Context, socket string, timeout time.Duration) (*status.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	node, err := status.Fetch(ctx, socket)
	var ae *status.AnswerError
	switch {
	case err == nil:
		return node, nil
	case errors.As(err, &ae) && ae.Err != nil:
		return nil, fmt.Errorf("the agent at %s sent an answer that is not a node status (%v); is %s gpuslice-nri's socket, and are gpuslice and gpuslice-nri the same version?", socket, ae.Err, socket)
	case errors.As(err, &ae):
		return nil, fmt.Errorf("the agent at %s answered %s: %s", socket, ae.Status, firstLine(ae.Body))
	}
	return nil, unreachable(socket, timeout, err)
}

// unreachable turns a failure to talk to the agent into what to do about it.
func unreachable(socket string, timeout time.Duration, err error) error {
	check := "is gpuslice-nri running? (systemctl status gpuslice-nri); if its statusSocket is elsewhere, pass --socket PATH (env " + SocketEnv + ")"
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("no agent socket at %s: %s", socket, check)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("permission denied on the agent socket %s: run as root (sudo gpuslice status), or as a member of the socket's group", socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		if fi, serr := os.Stat(socket); serr == nil && fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("%s is not a socket: pass the agent's socket with --socket PATH (env %s)", socket, SocketEnv)
		}
		return fmt.Errorf("nobody is listening on the agent socket %s (a stale socket: the agent stopped or crashed): %s", socket, check)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("the agent at %s did not answer within %v: is gpuslice-nri stuck? (journalctl -u gpuslice-nri); or pass a longer --timeout", socket, timeout)
	}
	return fmt.Errorf("talking to the agent at %s: %v: %s", socket, err, check)
}

// firstLine is the first line of an answer's body, at most 200 bytes,
// for error messages.
func firstLine(body []byte) string {
	line, _, _ := strings.Cut(string(body), "\n")
	line = strings.TrimSpace(line)
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	if line == "" {
		return "(empty answer)"
	}
	return line
}
