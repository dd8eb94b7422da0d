// Package hosted runs tenant control planes in a management Kubernetes
// cluster, as Kamaji and Gardener do: each tenant gets a namespace
// (Namespace) with kube-apiserver (a Deployment of two or more replicas
// behind a NodePort Service, spread across nodes, with a
// PodDisruptionBudget), kube-controller-manager and kube-scheduler
// (Deployments with leader election), its certificates and kubeconfigs in
// a Secret, and its data either in an etcd StatefulSet of its own
// (Dedicated) or under a key prefix, user and role of its own in a shared
// etcd cluster (Shared).
//
// The runtime owns its addressing: the API server listens in its pods at
// the node port's number and advertises the endpoint host, so users,
// fke-manager and the tenant's own nodes reach it at
// https://<endpoint host>:<node port>.
package hosted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/pki"
)

// Options configure a Runtime.
type Options struct {
	// Client reaches the management cluster the control planes run in.
	Client client.Client
	// Registry holds the component images: <Registry>/kube-apiserver:<Kubernetes
	// version> (and kube-controller-manager, kube-scheduler) and
	// <Registry>/etcd:<EtcdTag>, each binary at /usr/local/bin as in the
	// upstream images. fke builds them into its registry with `fke image
	// push-control-plane` (<registry>/fke).
	Registry string
	// EtcdTag is the etcd image's tag (default image.EtcdVersion).
	EtcdTag string
	// EndpointHost is the address at which users, fke-manager and nodes
	// reach the management cluster's node ports; empty: the InternalIP of
	// its first Ready node, by name.
	EndpointHost string
	// SystemNamespace holds the shared etcd cluster (default fke-system).
	SystemNamespace string
	// APIServerReplicas (default 2) and EtcdReplicas (default 3, for both
	// datastores) size the control planes.
	APIServerReplicas, EtcdReplicas int32
	// MaxStarting is how many control planes start at once (default
	// DefaultMaxStarting; below zero: no bound); the others wait, in the
	// order they were created, and say so in their status.
	MaxStarting int
	Logger      *slog.Logger
}

// Runtime runs control planes in the management cluster of Options.Client.
type Runtime struct {
	opts   Options
	c      client.Client
	log    *slog.Logger
	shared *sharedEtcd
	// admitMu makes each start's admission see the one before it.
	admitMu sync.Mutex
	// applied is what this runtime applied lately (see reapplyAfter).
	applied appliedSet
	// host is the endpoint host last chosen from the nodes (see
	// endpointHost).
	hostMu sync.Mutex
	host   string
	hostAt time.Time
}

var (
	_ controlplane.Runtime     = (*Runtime)(nil)
	_ controlplane.StartPoller = (*Runtime)(nil)
)

// StartPollInterval is how often the cluster controller asks again about
// a starting plane: every 500 ms, not the 200 ms of a local process. A
// hosted plane takes 15 s or more to start (its pods, then the API
// server's own start), and every Ensure reads the plane's objects from the
// management cluster.
func (r *Runtime) StartPollInterval() time.Duration { return 500 * time.Millisecond }

// FieldOwner is the runtime's field manager for server-side apply.
const FieldOwner = "fke-hosted-runtime"

// New returns a Runtime.
func New(opts Options) (*Runtime, error) {
	if opts.Client == nil {
		return nil, errors.New("hosted runtime: no client of the management cluster")
	}
	if opts.Registry == "" {
		return nil, errors.New("hosted runtime: no image registry for the control-plane components")
	}
	if opts.EtcdTag == "" {
		opts.EtcdTag = image.EtcdVersion
	}
	if opts.SystemNamespace == "" {
		opts.SystemNamespace = "fke-system"
	}
	if opts.APIServerReplicas <= 0 {
		opts.APIServerReplicas = 2
	}
	if opts.EtcdReplicas <= 0 {
		opts.EtcdReplicas = 3
	}
	if opts.MaxStarting == 0 {
		opts.MaxStarting = DefaultMaxStarting
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Runtime{opts: opts, c: opts.Client, log: opts.Logger}
	r.shared = &sharedEtcd{r: r}
	return r, nil
}

// imageRef is where the runtime's registry holds si, an image of
// image.ControlPlaneRepository.
func (r *Runtime) imageRef(si image.SystemImage) string {
	return r.opts.Registry + "/" + strings.TrimPrefix(si.Name, image.ControlPlaneRepository+"/")
}

func (r *Runtime) image(component, version string) string {
	if component == controlplane.Etcd {
		return r.opts.Registry + "/etcd:" + r.opts.EtcdTag
	}
	return r.opts.Registry + "/" + component + ":" + version
}

func (r *Runtime) apply(ctx context.Context, objs ...client.Object) error {
	for _, o := range objs {
		o.SetManagedFields(nil)
		o.SetResourceVersion("")
		k := keyOf(o)
		hash, err := objectHash(o)
		if err == nil && !r.applied.needs(k, hash, time.Now()) {
			continue
		}
		if err := r.c.Patch(ctx, o, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			r.applied.forget(k)
			return fmt.Errorf("applying %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
		if hash != "" {
			r.applied.done(k, hash, time.Now())
		}
	}
	return nil
}

// ensureNamespace makes the tenant's namespace, labelled with its Cluster,
// and returns it.
func (r *Runtime) ensureNamespace(ctx context.Context, key, datastore string) (*corev1.Namespace, error) {
	name := Namespace(key)
	ns := &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{LabelCluster: labelValue(key)},
			Annotations: map[string]string{AnnotationCluster: key, AnnotationDatastore: datastore},
		},
	}
	existing := &corev1.Namespace{}
	err := r.c.Get(ctx, client.ObjectKey{Name: name}, existing)
	switch {
	case err == nil:
		if !existing.DeletionTimestamp.IsZero() {
			return nil, fmt.Errorf("namespace %s of %s is still being deleted", name, key)
		}
		if existing.Annotations[AnnotationCluster] != key {
			return nil, fmt.Errorf("namespace %s belongs to %q, not %s", name, existing.Annotations[AnnotationCluster], key)
		}
		if d := existing.Annotations[AnnotationDatastore]; d != "" && d != datastore {
			return nil, fmt.Errorf("control plane %s keeps its data in the %s datastore; it cannot move to %s", key, d, datastore)
		}
		return existing, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting namespace %s: %w", name, err)
	}
	// Nothing this runtime applied there before is left.
	r.applied.forgetNamespace(name)
	if err := r.apply(ctx, ns); err != nil {
		return nil, err
	}
	return ns, nil
}

func labelValue(key string) string {
	ns, name, _ := cutKey(key)
	v := ns + "." + name
	if len(v) > 63 {
		sum := sha256.Sum256([]byte(key))
		v = hex.EncodeToString(sum[:])[:63]
	}
	return v
}

func cutKey(key string) (string, string, bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// Addresses reserves the API server's Service (and so its node port) and
// returns what its certificate must cover: the Service's names in the
// management cluster, its cluster IP, the endpoint host and the first IP
// of the tenant's service range (its kubernetes Service). etcd's cover its
// members' names.
func (r *Runtime) Addresses(ctx context.Context, spec controlplane.Spec) (controlplane.Addresses, error) {
	nsObj, err := r.ensureNamespace(ctx, spec.Key, datastoreOf(spec))
	if err != nil {
		return controlplane.Addresses{}, err
	}
	ns := nsObj.Name
	svc, err := r.ensureService(ctx, ns)
	if err != nil {
		return controlplane.Addresses{}, err
	}
	host, err := r.endpointHost(ctx)
	if err != nil {
		return controlplane.Addresses{}, err
	}
	ips, err := controlplane.APIServerIPs(spec.ServiceCIDR, host)
	if err != nil {
		return controlplane.Addresses{}, err
	}
	if ip := net.ParseIP(svc.Spec.ClusterIP); ip != nil {
		ips = append(ips, ip)
	}
	return controlplane.Addresses{
		APIServerDNSNames: []string{
			APIServerService, APIServerService + "." + ns, APIServerService + "." + ns + ".svc",
			APIServerService + "." + ns + ".svc.cluster.local",
		},
		APIServerIPs: ips,
		EtcdDNSNames: etcdNames(EtcdService, ns),
	}, nil
}

func datastoreOf(spec controlplane.Spec) string {
	if spec.Datastore == "" {
		return Dedicated
	}
	return spec.Datastore
}

// ensureService creates the API server's NodePort Service once and points
// its target port at the node port's number (where the API server
// listens).
func (r *Runtime) ensureService(ctx context.Context, ns string) (*corev1.Service, error) {
	svc := &corev1.Service{}
	err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: APIServerService}, svc)
	if apierrors.IsNotFound(err) {
		svc = apiServerService(ns, 0)
		if err := r.c.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating Service %s/%s: %w", ns, APIServerService, err)
		}
		err = r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: APIServerService}, svc)
	}
	if err != nil {
		return nil, fmt.Errorf("getting Service %s/%s: %w", ns, APIServerService, err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		return nil, fmt.Errorf("service %s/%s has no node port", ns, APIServerService)
	}
	np := svc.Spec.Ports[0].NodePort
	if svc.Spec.Ports[0].TargetPort.IntValue() != int(np) {
		want := apiServerService(ns, np)
		if err := r.apply(ctx, want); err != nil {
			return nil, err
		}
		svc = want
	}
	return svc, nil
}

// hostFor is how long endpointHost keeps a node it chose: every Ensure
// asks, and a list of a cluster's Nodes (their images and status
// included) is among the larger reads of its API server.
const hostFor = 30 * time.Second

// endpointHost is Options.EndpointHost, else the InternalIP of the first
// Ready node of the management cluster (chosen again every hostFor).
func (r *Runtime) endpointHost(ctx context.Context) (string, error) {
	if r.opts.EndpointHost != "" {
		return r.opts.EndpointHost, nil
	}
	r.hostMu.Lock()
	defer r.hostMu.Unlock()
	if r.host != "" && time.Since(r.hostAt) < hostFor {
		return r.host, nil
	}
	host, err := r.readyNodeAddress(ctx)
	if err != nil {
		return "", err
	}
	r.host, r.hostAt = host, time.Now()
	return host, nil
}

// readyNodeAddress is the InternalIP of the first Ready node, by name.
func (r *Runtime) readyNodeAddress(ctx context.Context) (string, error) {
	var nodes corev1.NodeList
	if err := r.c.List(ctx, &nodes); err != nil {
		return "", fmt.Errorf("listing the management cluster's nodes: %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	for _, n := range nodes.Items {
		if !nodeutil.NodeReady(&n) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
				return a.Address, nil
			}
		}
	}
	return "", errors.New("the management cluster has no Ready node with an IPv4 InternalIP to reach node ports at; set the endpoint host")
}

// Ensure applies every object of spec's control plane: the datastore,
// the Secret and the Deployments. It returns without waiting.
func (r *Runtime) Ensure(ctx context.Context, spec controlplane.Spec) (controlplane.Status, error) {
	if spec.Standby {
		return controlplane.Status{}, errors.New("the hosted runtime keeps no warm pool")
	}
	ds := datastoreOf(spec)
	nsObj, err := r.ensureNamespace(ctx, spec.Key, ds)
	if err != nil {
		return controlplane.Status{}, err
	}
	ns := nsObj.Name
	restoring, err := r.restoreState(ctx, nsObj, spec)
	if err != nil {
		return controlplane.Status{}, err
	}
	svc, err := r.ensureService(ctx, ns)
	if err != nil {
		return controlplane.Status{}, err
	}
	host, err := r.endpointHost(ctx)
	if err != nil {
		return controlplane.Status{}, err
	}
	switch queued, err := r.admitStart(ctx, nsObj); {
	case err != nil:
		return controlplane.Status{}, err
	case queued != "":
		st, err := r.Status(ctx, spec.Key)
		st.Queued = queued
		return st, err
	}
	p := plane{
		spec: spec, namespace: ns, image: r.image, nodePort: svc.Spec.Ports[0].NodePort, endpointHost: host,
		datastore: ds, apiServerReplicas: r.opts.APIServerReplicas, etcdReplicas: r.opts.EtcdReplicas,
	}
	data, err := secretData(spec, ns)
	if err != nil {
		return controlplane.Status{}, err
	}
	switch ds {
	case Dedicated:
		data[datastoreCA] = spec.PKI[pki.EtcdCACertFile]
		data[datastoreCert] = spec.PKI[pki.APIServerEtcdClientCertFile]
		data[datastoreKey] = spec.PKI[pki.APIServerEtcdClientKeyFile]
		p.etcdServers = etcdURLs(EtcdService, ns, int(r.opts.EtcdReplicas))
	case Shared:
		user, err := r.shared.ensureTenant(ctx, spec.Key, ns)
		if errors.Is(err, errStarting) {
			// Nothing to start before the datastore takes the tenant.
			return r.Status(ctx, spec.Key)
		}
		if err != nil {
			return controlplane.Status{}, err
		}
		data[datastoreCA], data[datastoreCert], data[datastoreKey] = user.ca, user.cert, user.key
		p.etcdServers, p.etcdPrefix = user.servers, user.prefix
	default:
		return controlplane.Status{}, fmt.Errorf("unknown datastore %q: use %s or %s", ds, Dedicated, Shared)
	}
	p.secretHash = hashData(data)
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta(SecretName, ns, nil),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	objs := []client.Object{secret}
	if ds == Dedicated {
		sts, hsvc, budget := etcdCluster(EtcdService, ns, SecretName, r.image(controlplane.Etcd, ""), r.opts.EtcdReplicas, nil, p.secretHash)
		objs = append(objs, hsvc, budget, sts)
	}
	// Only while the plane starts: a running plane's reconciles read
	// nothing more for it.
	if ds == Dedicated && !restoring && time.Since(startedAt(nsObj)) < startDeadline {
		switch wait, err := r.awaitMembers(ctx, ns); {
		case err != nil:
			return controlplane.Status{}, err
		case wait:
			// The datastore first; the components at a later reconcile.
			if err := r.apply(ctx, objs...); err != nil {
				return controlplane.Status{}, err
			}
			return r.Status(ctx, spec.Key)
		}
	}
	if restoring {
		// The datastore first, filled from the snapshot before any API
		// server runs.
		if err := r.apply(ctx, objs...); err != nil {
			return controlplane.Status{}, err
		}
		if err := r.importSnapshot(ctx, nsObj, spec); errors.Is(err, errStarting) {
			return r.Status(ctx, spec.Key)
		} else if err != nil {
			return controlplane.Status{}, err
		}
	}
	for _, d := range p.components() {
		objs = append(objs, d)
	}
	if r.opts.APIServerReplicas > 1 {
		objs = append(objs, pdb(ns, controlplane.APIServer, r.opts.APIServerReplicas-1))
	}
	if err := r.apply(ctx, objs...); err != nil {
		return controlplane.Status{}, err
	}
	st, pods, err := r.status(ctx, spec.Key)
	if err != nil {
		return st, err
	}
	if err := r.replaceDatastoreMembers(ctx, ns, ds, spec, pods); err != nil {
		// A repair, tried again at the next reconcile; the plane's status
		// still says how it runs (a member short).
		r.log.Error("replacing etcd members", "cluster", spec.Key, "error", err.Error())
	}
	return st, nil
}

// awaitMembers reports whether a new plane's API server must wait for
// its dedicated etcd: its Deployment is still to be made and fewer than a
// quorum of the members are listed in the EndpointSlices of their headless
// Service, from which the cluster's DNS serves their names. An API server
// started before then is told the names do not exist, and resolvers cache
// that (30 s in kubeadm's Corefile, 5 s in fke's): it reaches etcd late,
// or exits at its fixed 20 s deadline to reach etcd and restarts.
func (r *Runtime) awaitMembers(ctx context.Context, ns string) (bool, error) {
	d := &appsv1.Deployment{}
	switch err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.APIServer}, d); {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("getting Deployment %s/%s: %w", ns, controlplane.APIServer, err)
	}
	var eps discoveryv1.EndpointSliceList
	if err := r.c.List(ctx, &eps, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: EtcdService}); err != nil {
		return false, fmt.Errorf("listing the EndpointSlices of %s/%s: %w", ns, EtcdService, err)
	}
	return !quorumListed(eps.Items, r.opts.EtcdReplicas), nil
}

// quorumListed reports whether a quorum of an etcd cluster of replicas
// members is listed, by hostname and address, in the EndpointSlices eps.
func quorumListed(eps []discoveryv1.EndpointSlice, replicas int32) bool {
	names := map[string]bool{}
	for _, s := range eps {
		for _, ep := range s.Endpoints {
			if ep.Hostname != nil && len(ep.Addresses) > 0 && !ptr.Deref(ep.Conditions.Terminating, false) {
				names[*ep.Hostname] = true
			}
		}
	}
	return int32(len(names)) >= replicas/2+1
}

// replaceDatastoreMembers replaces the members of the tenant's etcd, its
// own (pods are its namespace's) or the shared one, whose pods started
// without their data.
func (r *Runtime) replaceDatastoreMembers(ctx context.Context, ns, datastore string, spec controlplane.Spec, pods []corev1.Pod) error {
	if datastore == Shared {
		return r.shared.replaceMembers(ctx)
	}
	return r.replaceMembers(ctx, ns, EtcdService, pods, func(ctx context.Context) (*clientv3.Client, error) {
		// The API server's pair: the dedicated etcd trusts every client
		// its CA signed.
		return r.etcdClient(ctx, ns, EtcdService, spec.PKI[pki.EtcdCACertFile], spec.PKI[pki.APIServerEtcdClientCertFile], spec.PKI[pki.APIServerEtcdClientKeyFile])
	})
}

// secretData is every file the components read: the PKI bundle, the
// kubeconfigs of kube-controller-manager and kube-scheduler (reaching the
// API server through its Service), kube-scheduler's configuration and the
// API server's admission configuration.
func secretData(spec controlplane.Spec, ns string) (map[string][]byte, error) {
	data := map[string][]byte{}
	for k, v := range spec.PKI {
		data[k] = v
	}
	server := "https://" + APIServerService + "." + ns + ".svc:" + strconv.Itoa(APIServerServicePort)
	for _, user := range []string{pki.ControllerManager, pki.Scheduler} {
		kc, err := pki.Kubeconfig(spec.Key, server, spec.PKI[pki.CACertFile], spec.PKI[pki.CertFile(user)], spec.PKI[pki.KeyFile(user)], user)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig for %s: %w", user, err)
		}
		data[user+".kubeconfig"] = kc
	}
	data[schedulerYAML] = controlplane.SchedulerConfig(files{}.Kubeconfig(pki.Scheduler), &leaderElection)
	f := files{}
	kc, err := controlplane.WebhookClientKubeconfig(f.PKI(pki.APIServerWebhookClientCertFile), f.PKI(pki.APIServerWebhookClientKeyFile))
	if err != nil {
		return nil, err
	}
	data[webhookKubeconfig] = kc
	data[admissionYAML] = controlplane.AdmissionConfig(f.PKI(webhookKubeconfig))
	return data, nil
}

func hashData(data map[string][]byte) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(data[k])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Status reads the tenant's Deployments, its etcd and its Service.
func (r *Runtime) Status(ctx context.Context, key string) (controlplane.Status, error) {
	st, _, err := r.status(ctx, key)
	return st, err
}

// status is Status and the pods of the tenant's namespace it read.
func (r *Runtime) status(ctx context.Context, key string) (controlplane.Status, []corev1.Pod, error) {
	ns := Namespace(key)
	nsObj := &corev1.Namespace{}
	if err := r.c.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		if apierrors.IsNotFound(err) {
			return controlplane.Status{}, nil, nil
		}
		return controlplane.Status{}, nil, fmt.Errorf("getting namespace %s: %w", ns, err)
	}
	var st controlplane.Status
	svc := &corev1.Service{}
	// No endpoint while a snapshot is being imported: the caller passes
	// the snapshot until it sees one.
	if nsObj.Annotations[AnnotationRestorePending] == "" {
		err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: APIServerService}, svc)
		switch {
		case err == nil && len(svc.Spec.Ports) == 1:
			host, err := r.endpointHost(ctx)
			if err != nil {
				return controlplane.Status{}, nil, err
			}
			st.Endpoint = "https://" + net.JoinHostPort(host, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
		case err != nil && !apierrors.IsNotFound(err):
			return controlplane.Status{}, nil, fmt.Errorf("getting Service %s/%s: %w", ns, APIServerService, err)
		}
	}
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return controlplane.Status{}, nil, fmt.Errorf("listing pods of %s: %w", ns, err)
	}
	// One read of the namespace's Deployments: the components' by name,
	// the addons' by label.
	var deps appsv1.DeploymentList
	if err := r.c.List(ctx, &deps, client.InNamespace(ns)); err != nil {
		return controlplane.Status{}, nil, fmt.Errorf("listing Deployments of %s: %w", ns, err)
	}
	byName := map[string]*appsv1.Deployment{}
	var addons []appsv1.Deployment
	for i, d := range deps.Items {
		if d.Labels[LabelAddon] != "" {
			addons = append(addons, d)
		} else {
			byName[d.Name] = &deps.Items[i]
		}
	}
	st.Addons, st.AddonNetwork = addonStatus(addons, pods.Items), addonNetwork(ns)
	restarts := map[string]int{}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			restarts[p.Labels[LabelComponent]] += int(c.RestartCount)
		}
	}
	etcd, err := r.etcdStatus(ctx, ns, nsObj.Annotations[AnnotationDatastore], key)
	if err != nil {
		return controlplane.Status{}, nil, err
	}
	etcd.Restarts = restarts[EtcdService]
	st.Components = append(st.Components, etcd)
	for _, c := range controlplane.Components[1:] {
		cs := controlplane.ComponentStatus{Name: c, Restarts: restarts[c]}
		if d := byName[c]; d != nil {
			cs.Running = d.Status.Replicas > 0
			cs.Ready = d.Status.AvailableReplicas > 0
			if runsOneVersion(d) {
				cs.Version = d.Annotations[AnnotationVersion]
			}
		}
		st.Components = append(st.Components, cs)
	}
	return st, pods.Items, nil
}

// runsOneVersion reports whether every pod of d runs its current template
// (and so the version it is annotated with), ready or not: while a new
// Deployment's second replica starts, the version is known; while an
// upgrade rolls, pods of the old template remain and it is not. (A version
// left unknown at creation read as an older one, and the cluster
// controller started an upgrade of a cluster just made.)
func runsOneVersion(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == d.Status.UpdatedReplicas
}

// rolledOut reports whether every replica of d runs its current template.
func rolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.AvailableReplicas == want
}

func (r *Runtime) etcdStatus(ctx context.Context, ns, datastore, key string) (controlplane.ComponentStatus, error) {
	cs := controlplane.ComponentStatus{Name: controlplane.Etcd}
	if datastore == Shared {
		ready, err := r.shared.tenantReady(ctx, ns)
		if err != nil {
			return cs, err
		}
		cs.Running, cs.Ready = ready, ready
		return cs, nil
	}
	sts := &appsv1.StatefulSet{}
	switch err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: EtcdService}, sts); {
	case apierrors.IsNotFound(err):
		return cs, nil
	case err != nil:
		return cs, fmt.Errorf("getting StatefulSet %s/%s: %w", ns, EtcdService, err)
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	cs.Running = sts.Status.Replicas > 0
	cs.Ready = sts.Status.ReadyReplicas >= replicas/2+1
	return cs, nil
}

// Stop scales kube-apiserver, kube-controller-manager, kube-scheduler and
// the addons to zero and keeps the datastore; Ensure scales the components
// back, EnsureAddons the addons.
func (r *Runtime) Stop(ctx context.Context, key string) error {
	ns := Namespace(key)
	defer r.applied.forgetNamespace(ns)
	addons, err := r.addonDeployments(ctx, ns)
	if err != nil {
		return err
	}
	names := slices.Clone(controlplane.Components[1:])
	for _, d := range addons {
		names = append(names, d.Name)
	}
	for _, c := range names {
		d := &appsv1.Deployment{}
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: c}, d); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("getting Deployment %s/%s: %w", ns, c, err)
		}
		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Replicas = ptr32(0)
		if err := r.c.Patch(ctx, d, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stopping %s/%s: %w", ns, c, err)
		}
	}
	return nil
}

func ptr32(v int32) *int32 { return &v }

// Delete removes the tenant's namespace (and with it every object of its
// control plane, and its etcd) and, for the shared datastore, its keys,
// user and role; it returns once the namespace is gone.
func (r *Runtime) Delete(ctx context.Context, key string) error {
	ns := Namespace(key)
	defer r.applied.forgetNamespace(ns)
	nsObj := &corev1.Namespace{}
	if err := r.c.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting namespace %s: %w", ns, err)
	}
	if nsObj.Annotations[AnnotationDatastore] == Shared {
		if err := r.shared.removeTenant(ctx, ns); err != nil {
			return err
		}
	}
	if err := r.c.Delete(ctx, nsObj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := r.c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s of %s is not gone yet: %w", ns, key, err)
	}
	r.log.Info("hosted control plane deleted", "cluster", key, "namespace", ns)
	return nil
}

// Upgrade rolls component's Deployment to spec.Version's image and waits
// until every replica runs it; the API server keeps serving through the
// rolling update (a new replica is ready before an old one stops). When
// the new version does not become available within five minutes, the
// Deployment goes back to the version it ran.
func (r *Runtime) Upgrade(ctx context.Context, spec controlplane.Spec, component string) error {
	if !slices.Contains(controlplane.Components[1:], component) {
		return fmt.Errorf("cannot upgrade %s on the hosted runtime", component)
	}
	ns := Namespace(spec.Key)
	d := &appsv1.Deployment{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: component}, d); err != nil {
		return fmt.Errorf("getting Deployment %s/%s: %w", ns, component, err)
	}
	old := d.Annotations[AnnotationVersion]
	if old == spec.Version && rolledOut(d) {
		return nil
	}
	if err := r.setVersion(ctx, d, spec.Version); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(wctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: component}, d); err != nil {
			return false, nil
		}
		return rolledOut(d), nil
	})
	if err == nil {
		return nil
	}
	if old != "" && old != spec.Version {
		if rerr := r.setVersion(ctx, d, old); rerr != nil {
			return fmt.Errorf("%s did not roll out at %s (%v), and going back to %s failed: %w", component, spec.Version, err, old, rerr)
		}
	}
	return fmt.Errorf("%s did not roll out at %s within 5m; it runs %s again", component, spec.Version, old)
}

func (r *Runtime) setVersion(ctx context.Context, d *appsv1.Deployment, version string) error {
	defer r.applied.forgetNamespace(d.Namespace)
	patch := client.MergeFrom(d.DeepCopy())
	d.Annotations[AnnotationVersion] = version
	d.Spec.Template.Spec.Containers[0].Image = r.image(d.Name, version)
	if err := r.c.Patch(ctx, d, patch); err != nil {
		return fmt.Errorf("setting %s/%s to %s: %w", d.Namespace, d.Name, version, err)
	}
	return nil
}

// SetAsideData is not available: a hosted tenant's data is replaced in
// place by RestoreInPlace (its datastore has no directory to set aside).
func (r *Runtime) SetAsideData(context.Context, string) error {
	return errors.New("the hosted runtime restores in place with RestoreInPlace; its data is not set aside")
}

// Adopt is not available: the hosted runtime keeps no warm pool.
func (r *Runtime) Adopt(context.Context, string, string) error {
	return errors.New("the hosted runtime keeps no warm pool")
}
