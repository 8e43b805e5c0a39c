package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// StatusPath is where the status socket serves the node's status.Node.
const StatusPath = "/v1/status"

// Registry is a registry of the Collector of snap (and nothing else: the
// scrape costs what the vGPU series cost).
func Registry(snap func() *status.Node) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(snap))
	return reg
}

// MetricsHandler serves reg at /metrics in Prometheus' text (or
// negotiated) format; a failed series is logged and the others served.
func MetricsHandler(reg prometheus.Gatherer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      logAdapter{log},
	}))
	return mux
}

// StatusHandler serves GET /v1/status: the latest snapshot as JSON (503
// until the first sample).
func StatusHandler(snap func() *status.Node) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(StatusPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		n := snap()
		if n == nil {
			http.Error(w, "the agent has not sampled its cards yet: retry in a second", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n)
	})
	return mux
}

type logAdapter struct{ log *slog.Logger }

func (l logAdapter) Println(v ...any) { l.log.Error("metrics: " + fmt.Sprint(v...)) }

// ListenUnix listens on the unix socket at path, mode 0660 (root's
// group may read the status too), creating its directory. A stale socket
// left by a dead agent is replaced; one a live agent still answers on is
// not, and neither is anything that is not a socket.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("status socket: %w", err)
	case st.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("status socket %s: a file that is not a socket is in the way: remove it or choose another statusSocket", path)
	default:
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("status socket %s: another agent answers on it: run one gpuslice-nri per node", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("status socket: removing a stale one: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("status socket: %w", err)
	}
	return l, nil
}

// Serve serves h on l in a goroutine until the returned server is closed;
// a failure after the start is logged.
func Serve(l net.Listener, h http.Handler, what string, log *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" server stopped", "address", l.Addr().String(), "error", err)
		}
	}()
	return srv
}
