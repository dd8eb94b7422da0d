// Package manager wires fke's controllers into a controller-runtime manager
// (the fke-manager process).
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controller/cluster"
	"fke.dev/fke/internal/controlplane/local"
)

// Options configure the manager.
type Options struct {
	// Kubeconfig of the management API server.
	Kubeconfig string
	// DataDir holds tenant control-plane data (under clusters/).
	DataDir string
	// Binaries finds the upstream binaries.
	Binaries binaries.Finder
	// HealthAddr serves /healthz and /readyz ("" disables).
	HealthAddr string
	// MetricsAddr serves Prometheus metrics ("0" disables).
	MetricsAddr string
	Logger      *slog.Logger
}

// Scheme returns the scheme with the built-in and fke.dev kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registration; cannot fail at run time
	}
	if err := fkev1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Run runs the manager until ctx ends, then stops every control plane it started.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading management kubeconfig %s: %w", opts.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	metricsAddr := opts.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 Scheme(),
		HealthProbeBindAddress: opts.HealthAddr,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		GracefulShutdownTimeout: ptr(30 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}

	rt, err := local.New(filepath.Join(opts.DataDir, "clusters"), opts.Binaries, log.With("component", "controlplane"))
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.StopAll(stopCtx); err != nil {
			log.Error("stopping control planes", "error", err)
		}
	}()

	if err := (&cluster.Reconciler{
		Client:    mgr.GetClient(),
		Runtime:   rt,
		Recorder:  mgr.GetEventRecorder("fke-cluster"),
		Versioner: ServerVersion,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up cluster controller: %w", err)
	}

	log.Info("starting fke-manager")
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// ServerVersion asks the API server at endpoint (with kubeconfig) for its version.
func ServerVersion(ctx context.Context, endpoint string, kubeconfig []byte) (string, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return "", err
	}
	cfg.Host = endpoint
	cfg.Timeout = 5 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

func ptr[T any](v T) *T { return &v }
