package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// statusURL is the agent's status endpoint; the host part is ignored, the
// connection goes to the socket.
const statusURL = "http://gpuslice-agent/v1/status"

// maxAnswer bounds what is read of the agent's answer: a node's report is
// a few kilobytes per card.
const maxAnswer = 16 << 20

// fetch asks the agent listening on the unix socket for the node's status.
// Its errors name the socket and say what to check.
func fetch(ctx context.Context, socket string, timeout time.Duration) (*status.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, statusURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, unreachable(socket, timeout, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, unreachable(socket, timeout, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the agent at %s answered %s: %s", socket, resp.Status, firstLine(body))
	}
	var node status.Node
	if err := json.Unmarshal(body, &node); err != nil {
		return nil, fmt.Errorf("the agent at %s sent an answer that is not a node status (%v); is %s gpuslice-nri's socket, and are gpuslice and gpuslice-nri the same version?", socket, err, socket)
	}
	return &node, nil
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
