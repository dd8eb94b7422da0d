// Package manager wires fke's controllers into a controller-runtime manager
// (the fke-manager process).
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/controller/autoscaler"
	backupcontroller "fke.dev/fke/internal/controller/backup"
	"fke.dev/fke/internal/controller/cluster"
	"fke.dev/fke/internal/controller/machine"
	"fke.dev/fke/internal/controller/nodepool"
	"fke.dev/fke/internal/controller/provreq"
	releasecontroller "fke.dev/fke/internal/controller/release"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/controlplane/hosted"
	"fke.dev/fke/internal/controlplane/local"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/index"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodeprovider/kwok"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/internal/tenant"
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
	// NodeAddress, when set, is the host address at which nodes reach tenant
	// API servers (the local-node bridge's gateway, e.g. 172.29.0.1): tenant
	// API servers advertise it and their certificates cover it. Empty keeps
	// them on loopback only.
	NodeAddress string
	// Webhook configures the validating admission webhook (Port 0 disables it).
	Webhook WebhookOptions
	// Registry is the OCI registry's loopback address (127.0.0.1:<port>)
	// that `fke up` runs; empty when none runs.
	Registry string
	Logger   *slog.Logger
	// WarmPool configures the pool of standby control planes.
	WarmPool cluster.WarmPool
	// OneProcessPlanes has the local runtime run each new control plane of
	// the default version in one fke-kube-plane process, not one process
	// per component (see local.Runtime.OneProcessPlanes).
	OneProcessPlanes bool
	// LocalNodes configure the local node provider.
	LocalNodes LocalNodeOptions
	// Runtimes are the control-plane runtimes this manager runs; nil runs
	// DefaultRuntimes (what `fke up` does), empty none: the cluster and
	// backup controllers then do not start and Cluster objects wait.
	Runtimes []fkev1.ControlPlaneRuntime
	// Hosted configures the hosted runtime.
	Hosted HostedOptions
	// Providers are the node providers this manager runs; nil runs every
	// one of Providers. The local provider runs only where this host can
	// run local nodes (see `fke doctor`).
	Providers []fkev1.ProviderName
	// LeaderElection, when enabled, makes replicas of the manager elect one
	// leader that runs the controllers.
	LeaderElection LeaderElectionOptions
	// ProcessHolder, when set, is the socket of a supervisor.Holder (fke's
	// daemon) that runs the processes of local control planes and local
	// nodes for this manager, so that they serve on while it is down and a
	// manager in its place takes them over. Empty: this manager runs them
	// itself and they end with it.
	ProcessHolder string
}

// HostedOptions configure the hosted runtime (see hosted.Options).
type HostedOptions struct {
	// Kubeconfig names the cluster control planes run in; empty: the
	// management cluster itself.
	Kubeconfig      string
	Registry        string
	EndpointHost    string
	SystemNamespace string
	// MaxStarting bounds how many control planes start at once (0: the
	// runtime's default; below zero: no bound).
	MaxStarting int
}

// LeaderElectionOptions configure leader election among manager replicas.
type LeaderElectionOptions struct {
	// Enabled turns leader election on (off for `fke up`, which runs one
	// manager).
	Enabled bool
	// Namespace holds the Lease; empty means the namespace of the pod the
	// manager runs in (from its service account).
	Namespace string
	// ID names the Lease (default LeaderElectionID).
	ID string
}

// LeaderElectionID names the Lease manager replicas elect their leader with.
const LeaderElectionID = "fke-manager.fke.dev"

// LocalNodeOptions configure the local node provider.
type LocalNodeOptions struct {
	// PauseImage is the nodes' sandbox image.
	PauseImage string
	// Registry is host:port of the registry nodes pull from.
	Registry string
	// Images are image archives imported into every node.
	Images []string
}

// DefaultSystemNamespace holds the manager's own objects in the management
// API (the warm pool's standby planes).
const DefaultSystemNamespace = "fke-system"

// OneProcessPlanesUsage documents the --one-process-planes flag of every
// command that passes Options.OneProcessPlanes.
const OneProcessPlanesUsage = "run each new tenant control plane of the default version in one fke-kube-plane process instead of one process per component (planes keep the layout they started with)"

// Scheme returns a scheme with the built-in kinds, the fke.dev kinds and the
// ProvisioningRequest kinds of tenant clusters.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fkev1.AddToScheme, provreq.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return s, nil
}

// EnvPprofAddr, when set, is the address fke-manager serves net/http/pprof
// on (for example 127.0.0.1:6060); `fke up` passes its environment on.
const EnvPprofAddr = "FKE_PPROF_ADDR"

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
	cfg.QPS, cfg.Burst = managerQPS, managerBurst
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	if opts.Webhook.CertDir == "" {
		opts.Webhook.CertDir = filepath.Join(opts.DataDir, "webhook-pki")
	}
	hook, err := prepareWebhook(opts.Webhook)
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg, scheme, opts, hook)
	if err != nil {
		return err
	}
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}

	if opts.Runtimes == nil {
		opts.Runtimes = DefaultRuntimes
	}
	// One client, one session (see supervisor.Holder): the holder takes
	// what a session does not claim for one of a crashed manager.
	var holder *supervisor.HolderClient
	if opts.ProcessHolder != "" {
		holder = supervisor.NewHolderClient(opts.ProcessHolder)
	}
	var rt *local.Runtime
	if enabled(opts.Runtimes, fkev1.RuntimeLocal) {
		if rt, err = local.New(filepath.Join(opts.DataDir, "clusters"), opts.Binaries, log.With("component", "controlplane")); err != nil {
			return err
		}
		if holder != nil {
			rt.HoldProcessesIn(holder)
		}
		if opts.OneProcessPlanes {
			if err := rt.OneProcessPlanes(); err != nil {
				return err
			}
		}
		defer stopping(log, "control planes", rt.StopAll)()
	} else {
		// Standby planes are local control planes: no pool, and no pool
		// status to read or write.
		opts.WarmPool = cluster.WarmPool{}
		if !enabled(opts.Runtimes, fkev1.RuntimeHosted) {
			log.Info("no control-plane runtime enabled: Cluster objects wait until a manager runs their runtime")
		}
	}

	runtimes := map[fkev1.ControlPlaneRuntime]controlplane.Runtime{}
	if rt != nil {
		runtimes[fkev1.RuntimeLocal] = rt
	}
	var kwokWorkloads controlplane.KwokWorkloads // the kwok of hosted clusters
	if enabled(opts.Runtimes, fkev1.RuntimeHosted) {
		h, err := hostedRuntime(cfg, scheme, opts.Hosted, log)
		if err != nil {
			return err
		}
		runtimes[fkev1.RuntimeHosted], kwokWorkloads = h, h
	}

	providers := map[fkev1.ProviderName]nodeprovider.Provider{}
	if enabled(opts.Providers, fkev1.ProviderKwok) {
		kwokProvider := kwok.New(kwok.Options{DataDir: filepath.Join(opts.DataDir, "clusters"), Binaries: opts.Binaries, Logger: log.With("component", "kwok"), Workloads: kwokWorkloads})
		providers[fkev1.ProviderKwok] = kwokProvider
		defer stopping(log, "kwok", kwokProvider.StopAll)()
	}
	if enabled(opts.Providers, fkev1.ProviderLocal) {
		if lp := localProvider(ctx, opts, log); lp != nil {
			if holder != nil {
				// Nodes run on when the manager crashes, as their pods do.
				lp.Procs().HoldIn(holder)
			}
			providers[fkev1.ProviderLocal] = lp
			if opts.NodeAddress == "" {
				// Local nodes reach tenant API servers at the bridge's gateway.
				opts.NodeAddress = hostnet.Gateway.String()
			}
			defer stopping(log, "local nodes", lp.StopAll)()
		}
	}
	tenants := tenant.NewRegistry(scheme, cluster.KubeconfigReader(mgr.GetClient()), log.With("component", "tenants"))
	defer tenants.Close()

	machines := &machine.Reconciler{
		Client: mgr.GetClient(), Tenants: tenants, Providers: providers, Recorder: mgr.GetEventRecorder("fke-machine"),
	}
	pools := &nodepool.Reconciler{Client: mgr.GetClient(), Tenants: tenants, Recorder: mgr.GetEventRecorder("fke-nodepool")}
	if lp, ok := providers[fkev1.ProviderLocal].(*localnodes.Provider); ok {
		pools.GPUAgents = lp.GPUAgents()
	}
	if err := machines.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up machine controller: %w", err)
	}
	if err := pools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up node pool controller: %w", err)
	}
	tenants.AddNodeHandler(machines.NodeHandler)
	tenants.AddConnectHandler(machines.ClusterConnected)
	tenants.AddNodeHandler(pools.NodeHandler)
	tenants.AddPodHandler(pools.PodHandler)
	scaler := &autoscaler.Reconciler{Client: mgr.GetClient(), Tenants: tenants, Recorder: mgr.GetEventRecorder("fke-autoscaler"), Booked: provreq.BookedPods}
	if err := scaler.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up autoscaler: %w", err)
	}
	tenants.AddPodHandler(scaler.PodHandler)
	provReqs := &provreq.Reconciler{Client: mgr.GetClient(), Tenants: tenants, Recorder: mgr.GetEventRecorder("fke-provisioningrequest")}
	if err := provReqs.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up provisioning request controller: %w", err)
	}

	releases := &releasecontroller.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clusters: tenantConfigs{tenants}, Recorder: mgr.GetEventRecorder("fke-release"),
		CacheDir: filepath.Join(opts.DataDir, "releases"),
	}
	if err := releases.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up release controller: %w", err)
	}

	if len(runtimes) > 0 {
		approvers := &bootstrap.Approvers{Log: log.With("component", "serving-approver")}
		defer approvers.StopAll()
		if err := setupClusters(mgr, opts, runtimes, tenants, providers, approvers); err != nil {
			return err
		}
	}

	if hook != nil {
		if err := hook.register(ctx, mgr, cfg, scheme, providers); err != nil {
			return fmt.Errorf("setting up the admission webhook: %w", err)
		}
	} else if err := removeWebhook(ctx, cfg, scheme); err != nil {
		return err
	}

	log.Info("starting fke-manager")
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// setupClusters registers the controllers that need a control-plane
// runtime: clusters and their backups.
func setupClusters(mgr ctrl.Manager, opts Options, runtimes map[fkev1.ControlPlaneRuntime]controlplane.Runtime, tenants *tenant.Registry,
	providers map[fkev1.ProviderName]nodeprovider.Provider, approvers *bootstrap.Approvers) error {
	backupDir := filepath.Join(opts.DataDir, "backups")
	backups := &backupcontroller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("fke-backup"), Dir: backupDir, Runtimes: runtimes}
	if err := backups.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up backup controller: %w", err)
	}
	if err := (&cluster.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Runtimes:    runtimes,
		BackupDir:   backupDir,
		Recorder:    mgr.GetEventRecorder("fke-cluster"),
		Versioner:   ServerVersion,
		Addons:      tenantAddons,
		Managed:     []addons.Managed{addons.MetricsServer{}, addons.GPUMetrics{}, addons.VerticalPodAutoscaler{}},
		Tenants:     tenants,
		Providers:   providers,
		Approvers:   approvers,
		NodeAddress: opts.NodeAddress,
		Warm:        opts.WarmPool,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up cluster controller: %w", err)
	}
	return nil
}

// The rate fke-manager's clients of the management (and hosting) cluster
// may send requests at: one reconcile of a hosted tenant applies about ten
// objects, and a hundred tenants reconcile at once after a failover.
const (
	managerQPS   = 200
	managerBurst = 400
)

// hostedRuntime builds the hosted runtime on the cluster o.Kubeconfig
// names, or on the management cluster (cfg). Its client reads the API
// server directly: a cache of every Pod, Deployment and Secret of a large
// hosting cluster would cost more than the reads.
func hostedRuntime(cfg *rest.Config, scheme *runtime.Scheme, o HostedOptions, log *slog.Logger) (*hosted.Runtime, error) {
	if o.Kubeconfig != "" {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig); err != nil {
			return nil, fmt.Errorf("loading the hosting cluster's kubeconfig %s: %w", o.Kubeconfig, err)
		}
		// As the management cluster's client: client-go's default of 5
		// requests a second would hold every tenant's reconcile back.
		cfg.QPS, cfg.Burst = managerQPS, managerBurst
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client of the hosting cluster: %w", err)
	}
	return hosted.New(hosted.Options{
		Client: c, Registry: o.Registry, EndpointHost: o.EndpointHost, SystemNamespace: o.SystemNamespace,
		MaxStarting: o.MaxStarting, Logger: log.With("component", "hosted-runtime"),
	})
}

// enabled reports whether name is in list; a nil list enables every name.
func enabled[T comparable](list []T, name T) bool {
	return list == nil || slices.Contains(list, name)
}

// stopping returns a function, to defer, that stops what stop stops
// within 30 s and logs a failure.
func stopping(log *slog.Logger, what string, stop func(context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := stop(ctx); err != nil {
			log.Error("stopping", "what", what, "error", err)
		}
	}
}

// Environment of fke-manager (passed on by `fke up`) for local nodes that
// need images the registry does not serve: the sandbox image's name (by
// default fke's pause image in the registry), and image archives
// (comma-separated paths) imported into every local node.
const (
	EnvNodePauseImage = "FKE_NODE_PAUSE_IMAGE"
	EnvNodeImages     = "FKE_NODE_IMAGES"
)

// localProvider returns the local node provider when this host can run
// local nodes (root, containerd, runc, CNI plugins, ...; see `fke doctor`),
// else nil, logging why.
func localProvider(ctx context.Context, opts Options, log *slog.Logger) *localnodes.Provider {
	log = log.With("component", "local-nodes")
	host := hostnet.New(nil, log)
	if err := localnodes.Unavailable(localnodes.Checks(ctx, opts.Binaries, host)); err != nil {
		log.Info("local node provider not available; `fke doctor` says why", "reason", err.Error())
		return nil
	}
	lo := opts.LocalNodes
	if lo.Registry == "" && opts.Registry != "" {
		// Nodes reach the loopback registry at the bridge's gateway.
		if reg, err := nodejoin.NodeRegistry(opts.Registry); err == nil {
			lo.Registry = reg
		}
	}
	if lo.PauseImage == "" {
		lo.PauseImage = os.Getenv(EnvNodePauseImage)
	}
	if len(lo.Images) == 0 && os.Getenv(EnvNodeImages) != "" {
		lo.Images = strings.Split(os.Getenv(EnvNodeImages), ",")
	}
	p, err := localnodes.New(localnodes.Options{
		DataDir: opts.DataDir, Binaries: opts.Binaries, Logger: log, Host: host,
		PauseImage: lo.PauseImage, Registry: lo.Registry, Images: lo.Images,
		HostGPUDriver: localnodes.HostHasGPUDriver(),
	})
	if err != nil {
		log.Error("local node provider not available", "error", err)
		return nil
	}
	return p
}

// tenantAddons installs what every tenant cluster gets once its control
// plane is ready: the ProvisioningRequest API and the RBAC that lets nodes
// join by TLS bootstrap.
func tenantAddons(ctx context.Context, cfg *rest.Config) error {
	if err := addons.EnsureProvisioningRequestAPI(ctx, cfg); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("tenant client: %w", err)
	}
	return bootstrap.EnsureRBAC(ctx, cs)
}

// newManager creates the controller-runtime manager with its health checks
// and, when hook is set, its webhook server.
func newManager(cfg *rest.Config, scheme *runtime.Scheme, opts Options, hook *webhookSetup) (ctrl.Manager, error) {
	metricsAddr := opts.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	mopts := ctrl.Options{
		Scheme:                  scheme,
		HealthProbeBindAddress:  opts.HealthAddr,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		GracefulShutdownTimeout: ptr(30 * time.Second),
		// Profiling is off unless asked for (see the README, Development).
		PprofBindAddress: os.Getenv(EnvPprofAddr),
	}
	if hook != nil {
		mopts.WebhookServer = hook.server
	}
	if le := opts.LeaderElection; le.Enabled {
		mopts.LeaderElection = true
		mopts.LeaderElectionID = le.ID
		if mopts.LeaderElectionID == "" {
			mopts.LeaderElectionID = LeaderElectionID
		}
		mopts.LeaderElectionNamespace = le.Namespace
		// Run returns once the manager has stopped, so handing the Lease
		// back on the way out is safe and lets a new leader start at once.
		mopts.LeaderElectionReleaseOnCancel = true
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
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

// tenantConfigs gives the release controller the tenants' rest configs.
type tenantConfigs struct{ tenants *tenant.Registry }

var _ releasecontroller.Connector = tenantConfigs{}

func (t tenantConfigs) Config(ctx context.Context, key string) (*rest.Config, error) {
	tn, err := t.tenants.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return tn.Config, nil
}
