// Package tenant gives fke's controllers cached access to tenant clusters:
// one controller-runtime cluster (client + informer cache) per tenant, built
// from its admin kubeconfig and kept until the tenant is forgotten.
package tenant

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
)

// KubeconfigSource returns the admin kubeconfig of the tenant with key
// ("namespace/name" of its Cluster), or an error while it has none.
type KubeconfigSource func(ctx context.Context, key string) ([]byte, error)

// NodeHandler is told about every change of a Node in a tenant cluster.
type NodeHandler func(clusterKey string, node *corev1.Node)

// PodHandler is told about every change of a Pod in a tenant cluster.
type PodHandler func(clusterKey string, pod *corev1.Pod)

// ConnectHandler is told, in a goroutine of its own, each time the registry
// connects to a tenant cluster (its API server serves and its caches have
// synced): work that waited for that API server can go on at once instead of
// at its next retry.
type ConnectHandler func(clusterKey string)

// Tenant is a connection to one tenant cluster.
type Tenant struct {
	Key string
	// Config is the admin rest config.
	Config *rest.Config
	// Client reads from the cache (Nodes, Pods, PDBs, ...) and writes to the API server.
	Client client.Client
	// Cache is the informer cache behind Client.
	Cache cache.Cache
	// Clientset is a typed client (eviction, discovery).
	Clientset kubernetes.Interface
	// PodIndex groups the cached pods by node.
	PodIndex *PodIndex

	cancel context.CancelFunc
	done   chan struct{}
}

// Registry holds one Tenant per tenant cluster.
type Registry struct {
	scheme     *runtime.Scheme
	kubeconfig KubeconfigSource
	onNode     []NodeHandler
	onPod      []PodHandler
	onConnect  []ConnectHandler
	log        *slog.Logger

	mu      sync.Mutex
	tenants map[string]*Tenant
}

// NewRegistry returns a Registry. Node handlers are attached to every tenant's Node informer.
func NewRegistry(scheme *runtime.Scheme, kubeconfig KubeconfigSource, log *slog.Logger, onNode ...NodeHandler) *Registry {
	return &Registry{scheme: scheme, kubeconfig: kubeconfig, onNode: onNode, log: log, tenants: map[string]*Tenant{}}
}

// AddNodeHandler attaches h to tenants connected from now on.
func (r *Registry) AddNodeHandler(h NodeHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onNode = append(r.onNode, h)
}

// AddPodHandler attaches h to tenants connected from now on.
func (r *Registry) AddPodHandler(h PodHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onPod = append(r.onPod, h)
}

// AddConnectHandler attaches h to connections made from now on.
func (r *Registry) AddConnectHandler(h ConnectHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onConnect = append(r.onConnect, h)
}

// Connected returns the Tenant of key if this registry is connected to it,
// without connecting.
func (r *Registry) Connected(key string) (*Tenant, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tenants[key]
	return t, ok
}

// Get returns the Tenant of key, connecting (and syncing its Node cache) on
// first use. Safe for concurrent use.
func (r *Registry) Get(ctx context.Context, key string) (*Tenant, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.tenants[key]; ok {
		return t, nil
	}
	kc, err := r.kubeconfig(ctx, key)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", key, err)
	}
	cfg.QPS, cfg.Burst = 300, 600
	cfg.Timeout = 30 * time.Second
	cl, err := crcluster.New(cfg, func(o *crcluster.Options) {
		o.Scheme = r.scheme
		o.Cache.DefaultTransform = stripManagedFields
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", key, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	t := &Tenant{Key: key, Config: cfg, Client: cl.GetClient(), Cache: cl.GetCache(), Clientset: cs, PodIndex: NewPodIndex(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		if err := cl.Start(runCtx); err != nil {
			r.log.Error("tenant cache stopped", "cluster", key, "error", err)
		}
	}()
	nodeHandlers := append([]NodeHandler(nil), r.onNode...)
	if err := watch(ctx, t.Cache, &corev1.Node{}, func(n *corev1.Node) {
		for _, h := range nodeHandlers {
			h(key, n)
		}
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching nodes of %s: %w", key, err)
	}
	var indexed toolscache.ResourceEventHandlerRegistration
	podInformer, err := t.Cache.GetInformer(ctx, &corev1.Pod{})
	if err == nil {
		indexed, err = podInformer.AddEventHandler(indexThenNotify(t.PodIndex.Handler(), key, append([]PodHandler(nil), r.onPod...)))
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("indexing pods of %s: %w", key, err)
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	// The index has seen every pod once the cache has synced and its
	// handler has been given the initial list.
	if !t.Cache.WaitForCacheSync(syncCtx) || !toolscache.WaitForCacheSync(syncCtx.Done(), indexed.HasSynced) {
		cancel()
		return nil, fmt.Errorf("tenant %s: cache did not sync", key)
	}
	r.tenants[key] = t
	r.log.Info("connected to tenant cluster", "cluster", key, "host", cfg.Host)
	for _, h := range r.onConnect {
		go h(key)
	}
	return t, nil
}

// indexThenNotify feeds index, then tells handlers, from one informer
// listener, so that a handler woken by a pod change (the autoscaler, which
// then reads the index) finds the change already in the index. Two
// listeners of one informer run in goroutines of their own, in no set
// order: with the handlers on a listener of their own, a pass woken by a
// pod that just became unschedulable could read the index before it held
// that, find nothing to do and leave the pod to the next periodic scan.
func indexThenNotify(index toolscache.ResourceEventHandler, key string, handlers []PodHandler) toolscache.ResourceEventHandler {
	notify := func(o any) {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		if p, ok := o.(*corev1.Pod); ok {
			for _, h := range handlers {
				h(key, p)
			}
		}
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(o any, initial bool) { index.OnAdd(o, initial); notify(o) },
		UpdateFunc: func(old, o any) { index.OnUpdate(old, o); notify(o) },
		DeleteFunc: func(o any) { index.OnDelete(o); notify(o) },
	}
}

// Forget disconnects from the tenant of key. Idempotent.
func (r *Registry) Forget(key string) {
	r.mu.Lock()
	t, ok := r.tenants[key]
	delete(r.tenants, key)
	r.mu.Unlock()
	if ok {
		t.cancel()
		<-t.done
	}
}

// Close disconnects from every tenant.
func (r *Registry) Close() {
	r.mu.Lock()
	keys := make([]string, 0, len(r.tenants))
	for k := range r.tenants {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	for _, k := range keys {
		r.Forget(k)
	}
}

// stripManagedFields keeps cached objects small (30,000 pods).
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// watch calls fn with every added, updated and deleted object of obj's kind.
func watch[T client.Object](ctx context.Context, c cache.Cache, obj T, fn func(T)) error {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	notify := func(o any) {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		if typed, ok := o.(T); ok {
			fn(typed)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: notify,
	})
	return err
}

// Pods returns every cached Pod of the tenant without copying: the objects
// are the cache's own and must not be modified. For decision passes over
// tens of thousands of pods, where a List would allocate a copy of each.
func (t *Tenant) Pods(ctx context.Context) ([]*corev1.Pod, error) {
	return cachedObjects[*corev1.Pod](ctx, t, &corev1.Pod{}, &corev1.PodList{})
}

// Nodes is Pods for Nodes (same read-only contract).
func (t *Tenant) Nodes(ctx context.Context) ([]*corev1.Node, error) {
	return cachedObjects[*corev1.Node](ctx, t, &corev1.Node{}, &corev1.NodeList{})
}

// cachedObjects reads the informer's store directly; when the informer does
// not expose it, it falls back to a List without deep copies.
func cachedObjects[T client.Object](ctx context.Context, t *Tenant, obj T, list client.ObjectList) ([]T, error) {
	inf, err := t.Cache.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
		items := s.GetStore().List()
		out := make([]T, 0, len(items))
		for _, it := range items {
			if o, ok := it.(T); ok {
				out = append(out, o)
			}
		}
		return out, nil
	}
	if err := t.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []T
	err = meta.EachListItem(list, func(o runtime.Object) error {
		if typed, ok := o.(T); ok {
			out = append(out, typed)
		}
		return nil
	})
	return out, err
}
