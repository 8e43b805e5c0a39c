package status

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
)

// URL is the agent's status endpoint; the host part is ignored, the
// connection goes to the agent's unix socket.
const URL = "http://gpuslice-agent/v1/status"

// MaxAnswer bounds what is read of the agent's answer: a node's report is
// a few kilobytes per card.
const MaxAnswer = 16 << 20

// AnswerError is an agent that answered, but not with a node status: a
// status other than 200 (Status, and the answer's Body), or a body that
// does not decode (Err).
type AnswerError struct {
	Status string
	Body   []byte
	Err    error
}

func (e *AnswerError) Error() string {
	if e.Err != nil {
		return "not a node status: " + e.Err.Error()
	}
	return "answered " + e.Status
}

func (e *AnswerError) Unwrap() error { return e.Err }

// Fetch asks the agent listening on the unix socket for the node's
// status, within ctx. Failing to reach it returns the dialer's or the
// transport's error as is (errors.Is finds os.ErrNotExist,
// syscall.ECONNREFUSED, context.DeadlineExceeded), for the caller to say
// what to do; an answer that is not a status is an *AnswerError.
func Fetch(ctx context.Context, socket string) (*Node, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &AnswerError{Status: resp.Status, Body: body}
	}
	var node Node
	if err := json.Unmarshal(body, &node); err != nil {
		return nil, &AnswerError{Err: err}
	}
	return &node, nil
}
