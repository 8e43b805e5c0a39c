// Command gpuslice-webhook is gpuslice's mutating admission webhook: it
// turns the reference product's GPU resources of a pod
// (volcano.sh/gpu-mem.128Mi, volcano.sh/gpu-core.percentage, fractional
// nvidia.com/gpu) into DRA claims on the gpu.gpuslice.io driver (see
// pkg/admission and install/kubernetes/admission/README.md).
//
// It serves HTTPS only, with a certificate and key read from files and
// reloaded when they change, and answers /mutate (AdmissionReview v1),
// /healthz and /readyz.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuslice/gpuslice/pkg/admission"
	"github.com/gpuslice/gpuslice/pkg/certfile"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(os.Args[1:], log)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Error("gpuslice-webhook: " + err.Error())
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	listen, certFile, keyFile, kubeconfig string
	modelLabel                            string
	models                                map[string]int64
	wholeGPUs                             bool
	timeout                               time.Duration
}

func parseFlags(args []string) (*options, error) {
	o := &options{models: map[string]int64{}}
	fs := flag.NewFlagSet("gpuslice-webhook", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", ":8443", "address of the HTTPS server (/mutate, /healthz, /readyz)")
	fs.StringVar(&o.certFile, "tls-cert-file", "/etc/gpuslice-webhook/tls/tls.crt", "serving certificate (PEM), reloaded when it changes")
	fs.StringVar(&o.keyFile, "tls-key-file", "/etc/gpuslice-webhook/tls/tls.key", "its private key (PEM), reloaded when it changes")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server; in-cluster credentials when empty")
	fs.StringVar(&o.modelLabel, "model-label", admission.DefaultModelLabel, "node label naming the card model (the reference's accelerator: nvidia-<model>)")
	fs.Func("card-memory", "MODEL=SIZE: the memory of the cards of nodes labelled --model-label=MODEL (e.g. nvidia-tesla-t4=15Gi), "+
		"for nvidia.com/gpu of pods selecting that model; repeatable. Otherwise the cards' memory is read from the driver's ResourceSlices",
		func(s string) error { return o.addModel(s) })
	fs.BoolVar(&o.wholeGPUs, "whole-gpus", false, "translate whole nvidia.com/gpu requests too (a vGPU of all a card's memory per card); "+
		"by default they are left to the cluster's device plugin")
	fs.DurationVar(&o.timeout, "review-timeout", admission.DefaultReviewTimeout, "bound of the API calls of one admission review")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.timeout <= 0 || o.timeout > 30*time.Second {
		return nil, fmt.Errorf("--review-timeout=%s: want a duration above 0 and at most 30s (the API server waits at most 30s)", o.timeout)
	}
	return o, nil
}

// addModel reads one --card-memory.
func (o *options) addModel(s string) error {
	model, size, ok := strings.Cut(s, "=")
	if !ok || model == "" {
		return fmt.Errorf("%q: want MODEL=SIZE, e.g. nvidia-tesla-t4=15Gi", s)
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return fmt.Errorf("%q: size %q: %v", s, size, err)
	}
	v, whole := q.AsInt64()
	if !whole || v < admission.MemoryUnit || v%(1<<20) != 0 {
		return fmt.Errorf("%q: size %q: want whole MiB, at least 128Mi", s, size)
	}
	o.models[model] = v
	return nil
}

func run(args []string, log *slog.Logger) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return serve(ctx, ln, o, log)
}

// serve runs the webhook on ln until ctx ends.
func serve(ctx context.Context, ln net.Listener, o *options, log *slog.Logger) error {
	certs, err := certfile.New(o.certFile, o.keyFile)
	if err != nil {
		return err
	}
	certs.OnReloadError = func(err error) { log.Warn("certificate not reloaded; the previous one stays in use", "err", err) }
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("API server credentials: %w", err)
	}
	cfg.UserAgent = "gpuslice-webhook"
	// A burst of pods (a Job's) must not queue behind the client's
	// default rate limit of 5 calls a second.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	m := &admission.Mutator{
		Client:    client,
		Cards:     &admission.Cards{Client: client, ModelLabel: o.modelLabel, Models: o.models},
		WholeGPUs: o.wholeGPUs,
	}
	srv := &http.Server{
		Handler:           routes(&admission.Handler{Mutator: m, Log: log, Timeout: o.timeout}),
		TLSConfig:         certs.ServerConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      40 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	log.Info("serving", "listen", ln.Addr().String(), "wholeGPUs", o.wholeGPUs, "models", len(o.models))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Finish the reviews in flight: a review cut short is a pod refused.
	shutdown, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// routes serves the webhook and its probes, which answer once the
// server runs: it starts only with its certificate loaded and its API
// client made. A renewed certificate that fails to load is logged, and
// the previous one stays in use (making the webhook unready would refuse
// the pods it serves at once, not when that certificate expires).
func routes(mutate http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mutate", mutate)
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	return mux
}
