package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/metrics"
)

// observability is the agent's sampling of its cards and vGPUs and the
// servers of what it samples: /metrics (TCP) and /v1/status (a unix
// socket).
type observability struct {
	obs     *agent.Observer
	mon     *gpu.Monitor // nil without NVML
	servers []*http.Server
	// The addresses actually bound ("" when not serving).
	metricsAddr, statusSocket string
}

// startObservability starts sampling and serving. Nothing here stops the
// agent: an NVML that does not load leaves its series absent (and says
// so in the status's problems), an address that cannot be bound one log
// line and no server.
func startObservability(a *agent.Agent, cfg *config.Config, log *slog.Logger) *observability {
	o := &observability{}
	opts := agent.ObserveOptions{Window: time.Duration(cfg.MetricsWindowMs) * time.Millisecond,
		Sched: agent.ReadSchedFile}
	var indices []int
	for _, c := range a.Cards() {
		indices = append(indices, c.Index)
	}
	mon, err := gpu.OpenMonitor(cfg.NVMLLibrary, indices, log)
	if err != nil {
		opts.NVMLProblem = err.Error() + ": card memory used, utilization and health are absent"
	} else {
		o.mon, opts.Cards = mon, mon
	}
	o.obs = a.Observe(opts)
	if cfg.MetricsAddress != "" {
		l, err := net.Listen("tcp", cfg.MetricsAddress)
		if err != nil {
			log.Error("metrics: cannot listen; the agent goes on without /metrics (metricsAddress)",
				"address", cfg.MetricsAddress, "error", err)
		} else {
			o.metricsAddr = l.Addr().String()
			reg := metrics.Registry(o.obs.Snapshot)
			o.servers = append(o.servers, metrics.Serve(l, metrics.MetricsHandler(reg, log), "metrics", log))
			log.Info("serving metrics", "address", "http://"+o.metricsAddr+"/metrics")
		}
	}
	if cfg.StatusSocket != "" {
		l, err := metrics.ListenUnix(cfg.StatusSocket)
		if err != nil {
			log.Error("the agent goes on without its status socket (statusSocket)", "error", err)
		} else {
			o.statusSocket = cfg.StatusSocket
			o.servers = append(o.servers, metrics.Serve(l, metrics.StatusHandler(o.obs.Snapshot), "status", log))
			log.Info("serving the status", "socket", cfg.StatusSocket, "path", metrics.StatusPath)
		}
	}
	return o
}

// close stops the servers, the sampling and NVML.
func (o *observability) close() {
	for _, s := range o.servers {
		s.Close()
	}
	o.obs.Close()
	if o.mon != nil {
		o.mon.Close()
	}
}
