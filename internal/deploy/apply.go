package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"sigs.k8s.io/cli-utils/pkg/apply"
	"sigs.k8s.io/cli-utils/pkg/apply/event"
	"sigs.k8s.io/cli-utils/pkg/common"
	"sigs.k8s.io/cli-utils/pkg/inventory"
	"sigs.k8s.io/cli-utils/pkg/manifestreader"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// FieldManager is the server-side apply field manager of everything fke
// deploy applies.
const FieldManager = "fke"

// Options say how Apply applies.
type Options struct {
	// Release names the inventory (and the revisions) the objects belong to.
	Release string
	// Namespace is given to namespaced objects that have none.
	Namespace string
	// Prune deletes objects of the inventory that are not applied now.
	Prune bool
	// DryRun sends everything as a server-side dry run and changes nothing;
	// the result carries a diff per object.
	DryRun bool
	// Wait waits up to Timeout until every object is Current.
	Wait    bool
	Timeout time.Duration
	// Progress, if set, is told of each step as it happens (from one
	// goroutine at a time).
	Progress func(Progress)
}

// Progress is one step of an apply, as a CLI prints it.
type Progress struct {
	Object string `json:"object"`
	// Action is applied (unchanged, changed or created in a dry run),
	// pruned, ready, failed, skipped, problem (something that delays it,
	// said once) or rollback.
	Action  string `json:"action"`
	Message string `json:"message,omitempty"`
}

// ObjectResult is what happened to one object.
type ObjectResult struct {
	Object string `json:"object"`
	// Action is applied (unchanged, changed or created in a dry run),
	// pruned, kept (not pruned), failed or skipped.
	Action string `json:"action"`
	// Status is the object's kstatus (Current, InProgress, Failed, ...)
	// when it was waited for.
	Status   string   `json:"status,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Diff     string   `json:"diff,omitempty"`
	Error    string   `json:"error,omitempty"`
	// Planned is the object as the dry run returned it, or the object a
	// dry run would prune (dry run only).
	Planned *unstructured.Unstructured `json:"-"`
}

// Result is the outcome of Apply.
type Result struct {
	Objects []ObjectResult `json:"objects"`
	// Ready is true when every object applied (and, with Wait, is Current).
	Ready bool `json:"ready"`
	// GaveUp is set when the wait ended before the timeout on a problem
	// waiting will not cure.
	GaveUp *GaveUp `json:"gaveUp,omitempty"`
}

// NotReadyError is returned when objects failed to apply or did not become
// Current in time; it lists why, one line per object.
type NotReadyError struct {
	Lines []string
	// GaveUp is set when the wait ended early (see Result.GaveUp).
	GaveUp *GaveUp
}

func (e *NotReadyError) Error() string {
	head := "not every object is ready"
	if e.GaveUp != nil {
		head += fmt.Sprintf(" (stopped waiting after %s: %s cannot become ready)", e.GaveUp.After, e.GaveUp.Object)
	}
	return head + ":\n  " + strings.Join(e.Lines, "\n  ")
}

// Cluster is the tenant cluster the applier talks to.
type Cluster struct {
	config  *rest.Config
	getter  *restGetter
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  *crdMapper
}

// NewCluster connects to the cluster of cfg (nothing is sent yet).
func NewCluster(cfg *rest.Config) (*Cluster, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	mapper := newCRDMapper(restmapper.NewDeferredDiscoveryRESTMapper(cached), dyn)
	return &Cluster{config: cfg, getter: &restGetter{cfg: cfg, disco: cached, mapper: mapper}, Client: cs, Dynamic: dyn, Mapper: mapper}, nil
}

// restGetter gives kubectl's factory (which cli-utils' inventory client
// and applier take) the clients made from one rest config.
type restGetter struct {
	cfg    *rest.Config
	disco  discovery.CachedDiscoveryInterface
	mapper meta.RESTMapper
}

var _ genericclioptions.RESTClientGetter = (*restGetter)(nil)

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }
func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.disco, nil
}
func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }
func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{})
}

// InventoryName is the name of a release's inventory ConfigMap.
func InventoryName(release string) string { return "inventory-" + release }

func inventoryInfo(release string) inventory.Info {
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace(SystemNamespace)
	cm.SetName(InventoryName(release))
	cm.SetLabels(map[string]string{common.InventoryLabel: inventoryID(release)})
	return inventory.WrapInventoryInfoObj(cm)
}

// inventoryID is the id of release's inventory, which cli-utils writes in
// the owning-inventory annotation of each object it applies.
func inventoryID(release string) string { return "fke-deploy." + release }

// ObjectName names an object in progress lines: "Kind name" for
// cluster-scoped objects, "Kind namespace/name" for the others.
func ObjectName(kind, namespace, name string) string {
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}

func idName(id object.ObjMetadata) string {
	return ObjectName(id.GroupKind.Kind, id.Namespace, id.Name)
}

// Apply applies objs to the cluster as release opts.Release (see Options).
// Objects are copied, not changed. It returns a NotReadyError when an
// object failed to apply or, with Wait, did not become Current in time.
func (c *Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured, opts Options) (*Result, error) {
	objs = copyObjects(objs)
	if err := c.setNamespaces(objs, opts.Namespace); err != nil {
		return nil, err
	}
	dry := common.DryRunNone
	if opts.DryRun {
		dry = common.DryRunServer
	} else if err := c.ensureNamespaces(ctx, objs); err != nil {
		return nil, err
	}
	factory := cmdutil.NewFactory(c.getter)
	invClient, err := inventory.NewClient(factory, inventory.WrapInventoryObj, inventory.InvInfoToConfigMap, inventory.StatusPolicyAll, inventory.ConfigMapGVK)
	if err != nil {
		return nil, fmt.Errorf("inventory client: %w", err)
	}
	applier, err := apply.NewApplierBuilder().WithFactory(factory).WithInventoryClient(invClient).WithStatusWatcher(c.statusWatcher()).Build()
	if err != nil {
		return nil, fmt.Errorf("applier: %w", err)
	}
	ao := apply.ApplierOptions{
		ServerSideOptions: common.ServerSideOptions{ServerSideApply: true, ForceConflicts: true, FieldManager: FieldManager},
		EmitStatusEvents:  true,
		NoPrune:           !opts.Prune,
		DryRunStrategy:    dry,
		// Objects that another tool created (kubectl apply, an earlier
		// helm install) are adopted; those of another fke release are not.
		InventoryPolicy: inventory.PolicyAdoptIfNoInventory,
		PruneTimeout:    0,
	}
	runCtx := ctx
	if opts.Wait && !opts.DryRun {
		ao.ReconcileTimeout = opts.Timeout
		var cancel context.CancelFunc
		// The applier's reconcile timeout runs per wait step (CRDs first,
		// then the rest); the context bounds the whole apply.
		runCtx, cancel = context.WithTimeout(ctx, opts.Timeout+5*time.Second)
		defer cancel()
	}
	inv := inventoryInfo(opts.Release)
	c.Mapper.expect(objs)
	defer c.Mapper.expect(nil)
	// Without pruning, cli-utils abandons the objects it would have pruned:
	// it drops them from the inventory, and a later --prune would never
	// delete them. fke keeps them there instead.
	var keep object.ObjMetadataSet
	if !opts.Prune && !opts.DryRun {
		prev, err := invClient.GetClusterObjs(inv)
		if err != nil {
			return nil, fmt.Errorf("reading inventory of %s: %w", opts.Release, err)
		}
		keep = prev.Diff(object.UnstructuredSetToObjMetadataSet(objs))
	}
	// A final problem cancels the run: cli-utils ends the wait at once and
	// skips what comes after it (the prune; the inventory keeps the objects
	// it would have pruned, for the next deploy).
	runCtx, stopRun := context.WithCancel(runCtx)
	defer stopRun()
	r := &run{c: c, opts: opts, results: map[object.ObjMetadata]*ObjectResult{}, applied: objs, stopRun: stopRun, started: time.Now()}
	stop := r.watchProblems(runCtx)
	for ev := range applier.Run(runCtx, inv, objs, ao) {
		if ev.Type == event.ErrorType && errors.Is(ev.ErrorEvent.Err, context.Canceled) && r.stopped() {
			continue // the wait this run gave up
		}
		if err := r.handle(ctx, ev); err != nil {
			stop()
			return nil, err
		}
	}
	r.waitJobs(runCtx)
	stop()
	if len(keep) > 0 {
		if _, err := invClient.Merge(inv, keep, common.DryRunNone); err != nil {
			return nil, fmt.Errorf("keeping unpruned objects in the inventory of %s: %w", opts.Release, err)
		}
	}
	return r.finish(ctx)
}

// copyObjects deep-copies objs so the caller's objects keep their form.
func copyObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out
}

func (c *Cluster) setNamespaces(objs []*unstructured.Unstructured, ns string) error {
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	err := manifestreader.SetNamespaces(c.Mapper, objs, ns, false)
	var unknown *manifestreader.UnknownTypesError
	if errors.As(err, &unknown) {
		var kinds []string
		for _, gvk := range unknown.GroupVersionKinds {
			kinds = append(kinds, gvk.Kind+" ("+gvk.GroupVersion().String()+")")
		}
		return fmt.Errorf("the cluster does not serve %s, and no CRD in the source defines it", strings.Join(kinds, ", "))
	}
	if err != nil {
		return fmt.Errorf("setting namespaces: %w", err)
	}
	return nil
}

// ensureNamespaces creates the releases' own namespace and the namespaces
// objects land in that neither exist nor are part of the source (as
// `helm install --create-namespace` does). Those are not in the
// inventory: a prune never deletes them.
func (c *Cluster) ensureNamespaces(ctx context.Context, objs []*unstructured.Unstructured) error {
	if err := EnsureNamespace(ctx, c.Client); err != nil {
		return err
	}
	inSource := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1" {
			inSource[o.GetName()] = true
		}
	}
	for _, o := range objs {
		ns := o.GetNamespace()
		if ns == "" || inSource[ns] {
			continue
		}
		inSource[ns] = true
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}

// foreign returns the objects of objs (namespaced ones without a
// namespace getting namespace) that exist in the cluster and belong to no
// release: made by another tool, and adopted by an apply. (Objects of
// another release are never applied nor pruned by this one.)
func (c *Cluster) foreign(ctx context.Context, objs []*unstructured.Unstructured, namespace string) ([]*unstructured.Unstructured, error) {
	objs = copyObjects(objs)
	if err := c.setNamespaces(objs, namespace); err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		id := object.UnstructuredToObjMetadata(o)
		live, err := c.live(ctx, id)
		if meta.IsNoMatchError(err) {
			continue // a kind whose CRD is in the source: nothing of it exists
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", idName(id), err)
		}
		if live != nil && live.GetAnnotations()[inventory.OwningInventoryKey] == "" {
			out = append(out, o)
		}
	}
	return out, nil
}

// live reads an object's current state; nil when it does not exist.
func (c *Cluster) live(ctx context.Context, id object.ObjMetadata) (*unstructured.Unstructured, error) {
	m, err := c.Mapper.RESTMapping(id.GroupKind)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = c.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = c.Dynamic.Resource(m.Resource).Namespace(id.Namespace)
	}
	obj, err := ri.Get(ctx, id.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// diagnose gathers the pods and events of obj's namespace and explains
// (Diagnose) why obj is not Current. Errors reading them leave it empty.
func (c *Cluster) diagnose(ctx context.Context, obj *unstructured.Unstructured) []string {
	var out []string
	for _, p := range c.assess(ctx, obj) {
		out = append(out, p.Text)
	}
	return out
}

// assess is diagnose with each problem's key and finality (Assess).
func (c *Cluster) assess(ctx context.Context, obj *unstructured.Unstructured) []Problem {
	if obj == nil {
		return nil
	}
	pods, err := c.podsOf(ctx, obj)
	if err != nil {
		return nil
	}
	var events []corev1.Event
	if len(pods) > 0 {
		list, err := c.Client.CoreV1().Events(obj.GetNamespace()).List(ctx, metav1.ListOptions{})
		if err == nil {
			events = list.Items
		}
	}
	return Assess(obj, pods, events)
}

// podsOf returns the pods a workload selects (its own for a Pod).
func (c *Cluster) podsOf(ctx context.Context, obj *unstructured.Unstructured) ([]corev1.Pod, error) {
	ns := obj.GetNamespace()
	if obj.GetKind() == "Pod" && obj.GetAPIVersion() == "v1" {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return []corev1.Pod{*p}, nil
	}
	if !workloadKinds[obj.GroupVersionKind().GroupKind().String()] {
		return nil, nil
	}
	sel, found, err := unstructured.NestedMap(obj.Object, "spec", "selector")
	if err != nil || !found {
		return nil, err
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &ls); err != nil {
		return nil, err
	}
	s, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || s.Empty() {
		return nil, err
	}
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// workloadKinds are the kinds whose spec.selector selects their pods.
var workloadKinds = map[string]bool{
	"Deployment.apps": true, "StatefulSet.apps": true, "DaemonSet.apps": true, "ReplicaSet.apps": true, "Job.batch": true,
}
