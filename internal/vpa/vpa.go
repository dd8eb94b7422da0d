// Package vpa runs the Vertical Pod Autoscaler of k8s.io/autoscaler — its
// recommender, updater and admission controller, from the upstream
// packages at the version go.mod pins — as one process beside a tenant's
// control plane (cmd/fke-vpa), the way fke runs it: usage from the resource
// metrics API, recommendations checkpointed in the cluster, no leader
// election, upstream's defaults otherwise. Unlike upstream's binaries it
// listens on nothing but the admission webhook, on a loopback address (or
// every address of a pod of its own), over
// TLS that requires a client certificate of the names it is told (see
// Webhook): upstream's admission controller listens on every interface and
// takes any caller, and each component serves Prometheus metrics and a
// health check over plain HTTP to anyone.
package vpa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"k8s.io/autoscaler/vertical-pod-autoscaler/common"
	admissionconfig "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/config"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/resource/pod"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/resource/pod/patch"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/resource/pod/recommendation"
	vparesource "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller/resource/vpa"
	vpaclientset "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/client/clientset/versioned"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/features"
	recommenderconfig "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/config"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/routines"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/target"
	controllerfetcher "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/target/controller_fetcher"
	updaterconfig "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/config"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/inplace"
	updaterlogic "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/logic"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater/priority"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/client"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/limitrange"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/metrics"
	"k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/status"
	vpautil "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/utils/vpa"
)

// Informer and scale-cache settings of upstream's three binaries.
const (
	resyncPeriod          = 10 * time.Minute
	scaleCacheFreshness   = 10 * time.Minute
	scaleCacheLifetime    = time.Hour
	scaleCacheJitter      = 1.0
	statusLeaseRenewEvery = 10 * time.Second
)

// Config is what Run needs.
type Config struct {
	// Kubeconfig is the file with the tenant API server and the VPA's
	// credentials.
	Kubeconfig string
	// Interval is how often the recommender fetches usage and the updater
	// looks for pods to update (upstream: one minute each).
	Interval time.Duration
	// StatusLeaseNamespace holds the admission controller's status Lease,
	// which the updater reads before it evicts.
	StatusLeaseNamespace string
	// Webhook is how the admission controller is served.
	Webhook Webhook
	// Log receives fke's own messages; upstream's packages log with klog.
	Log *slog.Logger
}

func (c Config) validate() error {
	var errs []error
	if c.Kubeconfig == "" {
		errs = append(errs, errors.New("no kubeconfig"))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("interval %s: must be positive", c.Interval))
	}
	if c.StatusLeaseNamespace == "" {
		errs = append(errs, errors.New("no namespace for the admission controller's status Lease"))
	}
	errs = append(errs, c.Webhook.validate())
	return errors.Join(errs...)
}

// Run runs the recommender, the updater and the admission controller until
// ctx ends (nil then) or one of them fails.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("VPA configuration: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	serverTLS, err := cfg.Webhook.tlsConfig()
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	defaults := common.DefaultCommonConfig()
	restCfg.QPS, restCfg.Burst = float32(defaults.KubeApiQps), int(defaults.KubeApiBurst)
	// Each component has its own clients, hence its own request rate
	// limit, as each of upstream's binaries has.
	var comps [3]component
	for i := range comps {
		if comps[i], err = newComponent(cfg, restCfg); err != nil {
			return err
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	recommenderHealth := metrics.NewHealthCheck(5 * cfg.Interval)
	updaterHealth := metrics.NewHealthCheck(5 * cfg.Interval)
	g.Go(func() error { return comps[0].recommender(ctx, recommenderHealth) })
	g.Go(func() error { return comps[1].updater(ctx, updaterHealth) })
	g.Go(func() error {
		admission, err := comps[2].admissionServer(ctx)
		if err != nil {
			return err
		}
		return cfg.Webhook.serve(ctx, serverTLS, admission, healthy(recommenderHealth, updaterHealth), cfg.Log)
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// component holds the configuration and the clients of one component.
type component struct {
	cfg  Config
	rest *rest.Config
	kube kubernetes.Interface
	vpas *vpaclientset.Clientset
}

func newComponent(cfg Config, restCfg *rest.Config) (component, error) {
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return component{}, fmt.Errorf("tenant client: %w", err)
	}
	vpas, err := vpaclientset.NewForConfig(restCfg)
	if err != nil {
		return component{}, fmt.Errorf("VPA client: %w", err)
	}
	return component{cfg: cfg, rest: restCfg, kube: kube, vpas: vpas}, nil
}

// informerFactory is a factory of the kind each upstream component makes:
// every namespace, managed fields dropped, options added.
func (c component) informerFactory(opts ...informers.SharedInformerOption) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(c.kube, resyncPeriod,
		append([]informers.SharedInformerOption{
			informers.WithNamespace(corev1.NamespaceAll),
			informers.WithTransform(client.StripManagedFields),
		}, opts...)...)
}

// startAndSync starts the factories and waits until their caches hold
// the cluster's objects.
func startAndSync(ctx context.Context, what string, factories ...informers.SharedInformerFactory) error {
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return fmt.Errorf("%s: the cache of %s did not sync", what, typeName(typ))
			}
		}
	}
	return nil
}

func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// recommender runs upstream's recommender: usage from the resource metrics
// API every Interval, history in VerticalPodAutoscalerCheckpoints.
func (c component) recommender(ctx context.Context, health *metrics.HealthCheck) error {
	rc := recommenderconfig.DefaultRecommenderConfig()
	rc.MetricsFetcherInterval = c.cfg.Interval
	rc.Storage = "checkpoint"
	factory := c.informerFactory()
	ctrl, err := routines.NewRecommenderController(ctx, c.rest, c.kube, c.vpas, factory, rc, health, ctx.Done())
	if err != nil {
		return fmt.Errorf("recommender: %w", err)
	}
	if err := startAndSync(ctx, "recommender", factory); err != nil {
		return err
	}
	c.cfg.Log.Info("recommender runs", "interval", rc.MetricsFetcherInterval)
	if err := ctrl.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("recommender: %w", err)
	}
	return ctx.Err()
}

// updater runs upstream's updater every Interval: it evicts (or resizes in
// place) pods whose requests are far from their recommendation.
func (c component) updater(ctx context.Context, health *metrics.HealthCheck) error {
	uc := updaterconfig.DefaultUpdaterConfig()
	uc.UpdaterInterval = c.cfg.Interval
	kubeFactory := c.informerFactory()
	// Pods on a node and not finished, as upstream's updater watches them.
	podFactory := c.informerFactory(informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName!=,status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)
	}))
	selectors := target.NewVpaTargetSelectorFetcher(c.rest, c.kube, kubeFactory, ctx.Done())
	controllers := controllerfetcher.NewControllerFetcher(c.rest, c.kube, kubeFactory, scaleCacheFreshness, scaleCacheLifetime, scaleCacheJitter, ctx.Done())
	limits := limitRanges(kubeFactory, c.cfg.Log)
	recommendations := recommendation.NewProvider(limits, vpautil.NewCappingRecommendationProcessor(limits))
	var ignored []string
	if uc.CommonFlags.IgnoredVpaObjectNamespaces != "" {
		ignored = strings.Split(uc.CommonFlags.IgnoredVpaObjectNamespaces, ",")
	}
	u, err := updaterlogic.NewUpdater(c.kube, c.vpas, kubeFactory, podFactory,
		uc.MinReplicas, uc.EvictionRateLimit, uc.EvictionRateBurst, uc.EvictionToleranceFraction,
		uc.UseAdmissionControllerStatus, uc.InPlaceSkipDisruptionBudget,
		uc.DefaultUpdateThreshold, uc.PodLifetimeUpdateThreshold, uc.EvictAfterOOMThreshold,
		uc.AdmissionControllerStatusLeaseName, c.cfg.StatusLeaseNamespace, uc.AdmissionControllerStatusLeaseTimeout,
		vpautil.NewCappingRecommendationProcessor(limits), priority.NewScalingDirectionPodEvictionAdmission(),
		selectors, controllers, priority.NewProcessor(), uc.CommonFlags.VpaObjectNamespace, ignored,
		[]patch.Calculator{inplace.NewResourceInPlaceUpdatesCalculator(recommendations), inplace.NewInPlaceUpdatedCalculator(), inplace.NewUnboostAnnotationCalculator()},
	)
	if err != nil {
		return fmt.Errorf("updater: %w", err)
	}
	if err := startAndSync(ctx, "updater", kubeFactory, podFactory); err != nil {
		return err
	}
	if features.Enabled(features.CPUStartupBoost) {
		defer u.ShutDown()
		for range uc.ConcurrentCPUStartupBoostSyncs {
			go wait.UntilWithContext(ctx, u.RunBoostWorker, time.Second)
		}
	}
	c.cfg.Log.Info("updater runs", "interval", uc.UpdaterInterval)
	health.StartMonitoring()
	tick := time.NewTicker(uc.UpdaterInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			once, cancel := context.WithTimeout(ctx, uc.UpdaterInterval)
			u.RunOnce(once)
			cancel()
			health.UpdateLastActivity()
		}
	}
}

// admissionServer builds upstream's admission controller (it sets the
// recommended requests on new pods and checks VPA objects) once its caches
// sync, and starts renewing its status Lease.
func (c component) admissionServer(ctx context.Context) (*logic.AdmissionServer, error) {
	factory := c.informerFactory()
	_, vpaIndexer := vpautil.NewVpasListerWithIndexer(c.vpas, ctx.Done(), corev1.NamespaceAll)
	selectors := target.NewVpaTargetSelectorFetcher(c.rest, c.kube, factory, ctx.Done())
	controllers := controllerfetcher.NewControllerFetcher(c.rest, c.kube, factory, scaleCacheFreshness, scaleCacheLifetime, scaleCacheJitter, ctx.Done())
	limits := limitRanges(factory, c.cfg.Log)
	recommendations := recommendation.NewProvider(limits, vpautil.NewCappingRecommendationProcessor(limits))
	matcher := vparesource.NewMatcher(vpaIndexer, selectors, controllers)
	if err := startAndSync(ctx, "admission controller", factory); err != nil {
		return nil, err
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("admission controller: %w", err)
	}
	status.NewUpdater(c.kube, status.AdmissionControllerStatusName, c.cfg.StatusLeaseNamespace, statusLeaseRenewEvery, hostname).Run(ctx.Done())
	ac := admissionconfig.DefaultAdmissionControllerConfig()
	return logic.NewAdmissionServer(pod.NewDefaultPreProcessor(), vparesource.NewDefaultPreProcessor(), limits, matcher,
		[]patch.Calculator{patch.NewResourceUpdatesCalculator(recommendations, ac.MaxAllowedCPUBoost), patch.NewObservedContainersCalculator()}), nil
}

// limitRanges is upstream's LimitRange calculator, or, as upstream does
// when it cannot be made, one that checks nothing.
func limitRanges(f informers.SharedInformerFactory, log *slog.Logger) limitrange.LimitRangeCalculator {
	l, err := limitrange.NewLimitsRangeCalculator(f)
	if err != nil {
		log.Error("LimitRanges are not taken into account", "err", err)
		return limitrange.NewNoopLimitsCalculator()
	}
	return l
}
