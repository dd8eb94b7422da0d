// Command fke-kube-plane runs one tenant's etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, built from upstream's
// packages, in one process, so the four share one Go runtime, one copy of
// the API types' schemes and one mapping of the code. fke's local runtime
// runs it for planes of the default version when asked to
// (--one-process-planes, see internal/controlplane/local/plane.go);
// bench/README ("etcd in the same process") records what it saves.
//
// Usage (each component's flags are upstream's, unchanged):
//
//	fke-kube-plane [--seed=FILE] [etcd FLAGS... --] kube-apiserver FLAGS... -- kube-controller-manager FLAGS... -- kube-scheduler FLAGS...
//
// --seed (with etcd embedded) names a file of upstream's default objects
// for a new cluster of this version (seed.go): planted into an empty
// datastore when it exists, saved from the first plane that starts on an
// empty one when it does not.
//
// With etcd named, the process also runs the tenant's etcd (upstream's
// embedded server, go.etcd.io/etcd/server/v3/embed) and starts the API
// server as soon as etcd listens (its requests wait until etcd serves),
// the controller manager and the scheduler once the API server serves.
//
// It is a module of its own beside hack/k8s (same pinned versions, plus
// etcd's server), so that hack/k8s's go.sum, which stamps the upstream
// binaries' build, does not change. `make binaries` builds it (build.sh);
// by hand, build it from cmd/fke-kube-plane with
// `CGO_ENABLED=0 go build -trimpath -o fke-kube-plane .` (as build.sh builds
// the upstream binaries, so the Go build cache of theirs serves), adding
// the -ldflags that build.sh's k8s_ldflags gives so that /version reports
// v1.37.2 (without them it reports v0.0.0).
//
// Upstream's cobra commands cannot be run side by side: each installs the
// process's signal handler, which may be installed only once. So the
// process installs it once and drives each component through the functions
// its command calls (options, completion, Run). When any component stops,
// the process exits with its error, and a supervisor restarts them all.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	_ "time/tzdata" // CronJob time zones, as upstream's kube-controller-manager

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as upstream's binaries
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's binaries
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as upstream's binaries
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

const (
	seedFlag          = "--seed="
	etcdName          = "etcd"
	apiServer         = "kube-apiserver"
	controllerManager = "kube-controller-manager"
	scheduler         = "kube-scheduler"
)

func main() {
	args, err := splitArgs(os.Args[1:])
	if err == nil {
		err = run(args)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fke-kube-plane: %v\n", err)
		os.Exit(1)
	}
}

// splitArgs splits "NAME FLAGS... -- NAME FLAGS..." into each component's
// flags; every one of the three components must be named once.
func splitArgs(argv []string) (map[string][]string, error) {
	out := map[string][]string{}
	cur := ""
	for _, a := range argv {
		switch {
		case a == "--":
			cur = ""
		case cur == "" && len(out) == 0 && strings.HasPrefix(a, seedFlag):
			out[seedFlag] = []string{strings.TrimPrefix(a, seedFlag)}
		case cur == "":
			if a != etcdName && a != apiServer && a != controllerManager && a != scheduler {
				return nil, fmt.Errorf("unknown component %q: want %s, %s, %s or %s", a, etcdName, apiServer, controllerManager, scheduler)
			}
			if _, dup := out[a]; dup {
				return nil, fmt.Errorf("component %s named twice", a)
			}
			cur = a
			out[cur] = []string{}
		default:
			out[cur] = append(out[cur], a)
		}
	}
	for _, c := range []string{apiServer, controllerManager, scheduler} {
		if _, ok := out[c]; !ok {
			return nil, fmt.Errorf("missing %s: usage: fke-kube-plane %s FLAGS... -- %s FLAGS... -- %s FLAGS...", c, apiServer, controllerManager, scheduler)
		}
	}
	return out, nil
}

// parse parses one component's flags into its options.
func parse(name string, sets cliflag.NamedFlagSets, args []string) error {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	for _, f := range sets.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func run(args map[string][]string) error {
	ctx := genericapiserver.SetupSignalContext()
	logs.InitLogs()
	defer logs.FlushLogs()

	// Each component that stops sends its error here; the first ends the
	// process.
	stopped := make(chan error, 4)
	var etcd *embed.Etcd
	if etcdArgs, ok := args[etcdName]; ok {
		cfg, err := etcdConfig(etcdArgs)
		if err != nil {
			return fmt.Errorf("%s: %w", etcdName, err)
		}
		if etcd, err = startEtcd(ctx, cfg, stopped); err != nil {
			return fmt.Errorf("%s: %w", etcdName, err)
		}
	}

	as := apiserveroptions.NewServerRunOptions()
	if err := parse(apiServer, as.Flags(), args[apiServer]); err != nil {
		return err
	}
	cm, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("%s: %w", controllerManager, err)
	}
	controllers, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	if err := parse(controllerManager, cm.Flags(controllers, disabled, aliases), args[controllerManager]); err != nil {
		return err
	}
	so := schedoptions.NewOptions()
	if err := parse(scheduler, *so.Flags, args[scheduler]); err != nil {
		return err
	}
	// The three share the process's feature gates and logging; the API
	// server's flags set them.
	if err := as.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(as.Logs, utilfeature.DefaultFeatureGate); err != nil {
		return err
	}
	var seed *seeder
	if path := args[seedFlag]; len(path) == 1 && etcd != nil {
		seed = newSeeder(path[0], as.Etcd.StorageConfig.Prefix, version.Get().GitVersion, etcd)
		go seed.start(ctx)
	}
	completed, err := as.Complete(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", apiServer, err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("%s: %w", apiServer, utilerrors.NewAggregate(errs))
	}

	start := func(name string, f func(context.Context) error) {
		go func() { stopped <- fmt.Errorf("%s stopped: %w", name, f(ctx)) }()
	}
	start(apiServer, func(ctx context.Context) error { return runAPIServer(ctx, completed, seed, stopped) })
	// The API server's clients start once it serves, as fke's runtime
	// starts their processes: started beside it they take the CPU its own
	// start needs, only to retry. FKE_PLANE_START=together starts all at
	// once (to measure the difference).
	if os.Getenv("FKE_PLANE_START") != "together" {
		if err := waitServing(ctx, cm.Generic.ClientConnection.Kubeconfig, stopped); err != nil {
			return err
		}
		if seed != nil {
			go seed.ready(ctx)
		}
	}
	start(controllerManager, func(ctx context.Context) error {
		c, err := cm.Config(ctx, controllers, disabled, aliases)
		if err != nil {
			return err
		}
		return kcmapp.Run(ctx, c.Complete())
	})
	start(scheduler, func(ctx context.Context) error {
		cc, sched, err := schedapp.Setup(ctx, so)
		if err != nil {
			return err
		}
		return schedapp.Run(ctx, cc, sched)
	})
	return <-stopped
}

// runAPIServer runs the API server as upstream's Run does, except that
// with a seed, upstream's hooks that create the seed's objects run
// inside the seeder's hook (seeder.hook), which lets /readyz pass without
// waiting for them when the seed was planted.
func runAPIServer(ctx context.Context, opts apiserveroptions.CompletedOptions, seed *seeder, stopped chan<- error) error {
	klog.InfoS("Version", "version", version.Get())
	if opts.InformerName == nil {
		name, err := toolscache.NewInformerName(apiServer)
		if err != nil {
			return err
		}
		opts.InformerName = name
	}
	config, err := apiserverapp.NewConfig(opts)
	if err != nil {
		return err
	}
	if seed != nil {
		config.KubeAPIs.ControlPlane.Generic.DisabledPostStartHooks.Insert(seededHooks...)
	}
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	server, err := apiserverapp.CreateServerChain(completed)
	if err != nil {
		return err
	}
	if seed != nil {
		server.GenericAPIServer.AddPostStartHookOrDie(seedHookName, seed.hook(stopped))
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	return prepared.Run(ctx)
}

// waitServing polls the API server's /readyz with the credentials of
// kubeconfig until it answers ok, or returns the error of the component
// that stopped first (from stopped).
func waitServing(ctx context.Context, kubeconfig string, stopped chan error) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", controllerManager, err)
	}
	cfg.Timeout = 2 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", controllerManager, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error() == nil {
			return nil
		}
		select {
		case err := <-stopped:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
