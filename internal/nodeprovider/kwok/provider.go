// Package kwok makes simulated worker nodes with kwok (sigs.k8s.io/kwok):
// the provider registers each Node itself, from the machine's template
// (labels, taints, GPU capacity), and one kwok process per tenant cluster
// keeps the Nodes Ready (status and lease) and plays the pods bound to them
// (Running, Succeeded, deleted). Nothing runs on the nodes.
package kwok

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/supervisor"
)

// Annotations on the Nodes the provider makes.
const (
	// AnnotationNode marks a Node kwok manages; kwok runs with
	// --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake, so
	// real nodes of the same cluster are left alone.
	AnnotationNode      = "kwok.x-k8s.io/node"
	AnnotationNodeValue = "fake"
	// AnnotationMachine names the Machine a Node was made for.
	AnnotationMachine = "fke.dev/machine"
	// AnnotationSimulateNotReady on a simulated Node makes it report
	// NotReady (as a kubelet whose runtime broke) until it is removed: a
	// fault to test node repair and workloads against.
	AnnotationSimulateNotReady = "fke.dev/simulate-not-ready"
)

// ProviderIDPrefix starts every provider ID: kwok://<cluster>/<node>.
const ProviderIDPrefix = "kwok://"

// Defaults for the zero fields of Options.
const (
	DefaultStartTimeout = 30 * time.Second
)

const (
	// clientQPS and clientBurst bound the provider's own requests per
	// cluster: creating a thousand nodes takes seconds, not minutes.
	clientQPS   = 200
	clientBurst = 400
	// stopGracePeriod: kwok exits at once on SIGTERM.
	stopGracePeriod = 5 * time.Second
	// listPageSize bounds one page of a Node list.
	listPageSize = 500
)

// Options configure a Provider.
type Options struct {
	// DataDir holds per-cluster files, under DataDir/<namespace>/<name>/kwok:
	// kwok's kubeconfig, configuration and log. Required.
	DataDir string
	// Binaries finds the kwok binary.
	Binaries binaries.Finder
	// Logger receives the provider's logs; nil discards them.
	Logger *slog.Logger
	// NodeIP is the InternalIP of the simulated nodes (default DefaultNodeIP).
	NodeIP string
	// StartTimeout bounds the wait for a new kwok process to serve
	// (default DefaultStartTimeout).
	StartTimeout time.Duration
	// Workloads runs the kwok of hosted clusters (nodeprovider.Cluster.Hosted)
	// in the management cluster; nil refuses hosted clusters.
	Workloads controlplane.KwokWorkloads
	// StuckPodAfter is how long a pod bound to a kwok node may stay
	// Pending without a container status before the provider re-drives it
	// (see stuckpods.go; default DefaultStuckPodAfter). Negative turns
	// re-driving off.
	StuckPodAfter time.Duration
}

// Provider is the kwok node provider. Its methods are safe for concurrent use.
type Provider struct {
	opts  Options
	log   *slog.Logger
	procs *supervisor.Group

	mu       sync.Mutex
	clusters map[string]*clusterState // by Cluster.Key
}

var _ nodeprovider.Provider = (*Provider)(nil)

// clusterState is what the provider keeps per tenant cluster.
type clusterState struct {
	key      string
	procName string
	dir      string

	// mu guards the fields below; it is held while kwok starts, never
	// during a Node request.
	mu          sync.Mutex
	released    bool // Release removed this state from Provider.clusters
	fingerprint string
	client      kubernetes.Interface
	proc        *supervisor.Process
	// workload: kwok was applied as a workload for this fingerprint.
	workload bool
	// stopRedriver stops the redriver of the cluster's pods (see
	// stuckpods.go); nil when none runs.
	stopRedriver func()
}

// New returns a Provider. It starts nothing: a cluster's kwok process starts
// on the first Create, Get or List for that cluster.
func New(opts Options) *Provider {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StuckPodAfter == 0 {
		opts.StuckPodAfter = DefaultStuckPodAfter
	}
	log := opts.Logger.With("provider", string(fkev1.ProviderKwok))
	return &Provider{
		opts:     opts,
		log:      log,
		procs:    supervisor.NewGroup(log),
		clusters: map[string]*clusterState{},
	}
}

// ProviderID returns the provider ID of node nodeName in cluster clusterName.
func ProviderID(clusterName, nodeName string) string {
	return ProviderIDPrefix + clusterName + "/" + nodeName
}

// parseProviderID splits kwok://<cluster>/<node>.
func parseProviderID(id string) (clusterName, nodeName string, ok bool) {
	rest, found := strings.CutPrefix(id, ProviderIDPrefix)
	if !found {
		return "", "", false
	}
	clusterName, nodeName, found = strings.Cut(rest, "/")
	if !found || clusterName == "" || nodeName == "" || strings.Contains(nodeName, "/") {
		return "", "", false
	}
	return clusterName, nodeName, true
}

// Name returns fkev1.ProviderKwok.
func (p *Provider) Name() fkev1.ProviderName { return fkev1.ProviderKwok }

// Create registers the Node of spec.Template with the kwok and machine
// annotations and provider ID kwok://<cluster>/<node>, after starting the
// cluster's kwok process if it does not run. Idempotent: when the Node
// exists with the same provider ID and machine, Create returns it. It does
// not wait for the Node to be Ready (kwok makes it Ready within seconds).
func (p *Provider) Create(ctx context.Context, cluster nodeprovider.Cluster, spec nodeprovider.NodeSpec) (nodeprovider.Instance, error) {
	if spec.MachineName == "" {
		return nodeprovider.Instance{}, errors.New("creating kwok node: empty machine name")
	}
	if spec.Template == nil || spec.Template.Name == "" {
		return nodeprovider.Instance{}, fmt.Errorf("creating kwok node for machine %s: no node template or node name", spec.MachineName)
	}
	client, err := p.prepare(ctx, cluster, true)
	if err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("creating node for machine %s: %w", spec.MachineName, err)
	}
	node := nodeFor(cluster, spec)
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		p.log.Debug("node created", "cluster", cluster.Key, "node", created.Name, "machine", spec.MachineName)
		return instanceOf(created), nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nodeprovider.Instance{}, fmt.Errorf("creating node %s for machine %s in cluster %s: %w", node.Name, spec.MachineName, cluster.Key, err)
	}
	existing, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("getting existing node %s for machine %s in cluster %s: %w", node.Name, spec.MachineName, cluster.Key, err)
	}
	if existing.Spec.ProviderID != node.Spec.ProviderID || existing.Annotations[AnnotationMachine] != spec.MachineName {
		return nodeprovider.Instance{}, fmt.Errorf("creating node %s for machine %s in cluster %s: the node exists with provider ID %q for machine %q",
			node.Name, spec.MachineName, cluster.Key, existing.Spec.ProviderID, existing.Annotations[AnnotationMachine])
	}
	return instanceOf(existing), nil
}

// Delete deletes the Node of providerID. A Node that is gone, or is not
// one this provider made in cluster, gives a *nodeprovider.NotFoundError.
// It does not need the kwok process and does not start it.
func (p *Provider) Delete(ctx context.Context, cluster nodeprovider.Cluster, providerID string) error {
	client, err := p.prepare(ctx, cluster, false)
	if err != nil {
		return fmt.Errorf("deleting instance %s: %w", providerID, err)
	}
	node, err := p.getNode(ctx, client, cluster, providerID)
	if err != nil {
		return fmt.Errorf("deleting instance %s: %w", providerID, err)
	}
	err = client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(node.UID))})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone, or replaced by another Node of the same name since the Get.
		return fmt.Errorf("deleting instance %s: %w", providerID, &nodeprovider.NotFoundError{ProviderID: providerID})
	case err != nil:
		return fmt.Errorf("deleting node %s in cluster %s: %w", node.Name, cluster.Key, err)
	}
	p.log.Debug("node deleted", "cluster", cluster.Key, "node", node.Name)
	return nil
}

// Get returns the instance of providerID, or a *nodeprovider.NotFoundError.
// It starts the cluster's kwok process if it does not run.
func (p *Provider) Get(ctx context.Context, cluster nodeprovider.Cluster, providerID string) (nodeprovider.Instance, error) {
	client, err := p.prepare(ctx, cluster, true)
	if err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("getting instance %s: %w", providerID, err)
	}
	node, err := p.getNode(ctx, client, cluster, providerID)
	if err != nil {
		return nodeprovider.Instance{}, fmt.Errorf("getting instance %s: %w", providerID, err)
	}
	return instanceOf(node), nil
}

// List returns the instances of every Node this provider made in cluster.
// It starts the cluster's kwok process if it does not run.
func (p *Provider) List(ctx context.Context, cluster nodeprovider.Cluster) ([]nodeprovider.Instance, error) {
	client, err := p.prepare(ctx, cluster, true)
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	var out []nodeprovider.Instance
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		nodes, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes of cluster %s: %w", cluster.Key, err)
		}
		for i := range nodes.Items {
			if ours(&nodes.Items[i], cluster) {
				out = append(out, instanceOf(&nodes.Items[i]))
			}
		}
		if nodes.Continue == "" {
			return out, nil
		}
		opts.Continue = nodes.Continue
	}
}

// InstanceTypes returns the whole catalog: kwok simulates any shape.
func (p *Provider) InstanceTypes(_ context.Context, catalog []fkev1.InstanceType) ([]fkev1.InstanceType, error) {
	out := make([]fkev1.InstanceType, 0, len(catalog))
	for i := range catalog {
		out = append(out, *catalog[i].DeepCopy())
	}
	return out, nil
}

// Release stops the cluster's kwok process and removes its files. The
// Nodes stay (the cluster is being deleted). Idempotent; a later call for
// the cluster starts a new kwok process.
func (p *Provider) Release(ctx context.Context, cluster nodeprovider.Cluster) error {
	dir, err := p.clusterDir(cluster.Key)
	if err != nil {
		return fmt.Errorf("releasing cluster: %w", err)
	}
	p.mu.Lock()
	st := p.clusters[cluster.Key]
	delete(p.clusters, cluster.Key)
	p.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.released = true
		st.stopRedriverLocked()
	}
	if err := p.procs.Stop(ctx, procName(cluster.Key)); err != nil {
		return fmt.Errorf("releasing cluster %s: stopping kwok: %w", cluster.Key, err)
	}
	if cluster.Hosted && p.opts.Workloads != nil {
		if err := p.opts.Workloads.StopKwok(ctx, cluster.Key); err != nil {
			return fmt.Errorf("releasing cluster %s: removing kwok: %w", cluster.Key, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("releasing cluster %s: removing kwok files: %w", cluster.Key, err)
	}
	p.log.Info("kwok released", "cluster", cluster.Key)
	return nil
}

// StopAll stops every kwok process (at manager shutdown) and the
// re-driving of pods, and leaves their files. A later call for a cluster
// starts its kwok process again.
func (p *Provider) StopAll(ctx context.Context) error {
	p.mu.Lock()
	states := make([]*clusterState, 0, len(p.clusters))
	for _, st := range p.clusters {
		states = append(states, st)
	}
	p.mu.Unlock()
	for _, st := range states {
		st.mu.Lock()
		st.stopRedriverLocked()
		st.mu.Unlock()
	}
	if err := p.procs.StopAll(ctx); err != nil {
		return fmt.Errorf("stopping kwok processes: %w", err)
	}
	return nil
}

// Pid returns the pid of the kwok process of the cluster with key
// clusterKey, or 0 when none runs.
func (p *Provider) Pid(clusterKey string) int {
	proc := p.procs.Get(procName(clusterKey))
	if proc == nil {
		return 0
	}
	return proc.Pid()
}

// prepare returns a client of cluster and, with startKwok, makes sure the
// cluster's kwok process runs, starting it and waiting until it serves.
func (p *Provider) prepare(ctx context.Context, cluster nodeprovider.Cluster, startKwok bool) (kubernetes.Interface, error) {
	if cluster.Config == nil {
		return nil, fmt.Errorf("cluster %s: no API server config", cluster.Key)
	}
	if cluster.Name == "" {
		return nil, fmt.Errorf("cluster %s: empty name", cluster.Key)
	}
	st, err := p.lockCluster(cluster.Key)
	if err != nil {
		return nil, err
	}
	defer st.mu.Unlock()

	if fp := fingerprint(cluster.Config); fp != st.fingerprint {
		client, err := newClient(cluster.Config)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", cluster.Key, err)
		}
		st.stopRedriverLocked() // its client is stale too
		if st.proc != nil {
			// Its kubeconfig is stale (the API server moved or its PKI changed).
			p.log.Info("restarting kwok: cluster config changed", "cluster", cluster.Key)
			if err := p.procs.Stop(ctx, st.procName); err != nil {
				return nil, fmt.Errorf("cluster %s: stopping kwok: %w", cluster.Key, err)
			}
			st.proc = nil
		}
		st.client, st.fingerprint, st.workload = client, fp, false
	}
	if !startKwok {
		return st.client, nil
	}
	if cluster.Hosted {
		if !st.workload {
			if err := p.runWorkload(ctx, st, cluster); err != nil {
				return nil, err
			}
			st.workload = true
		}
	} else if !running(st.proc) {
		if err := p.startLocked(ctx, st, cluster); err != nil {
			return nil, err
		}
	}
	if st.stopRedriver == nil && p.opts.StuckPodAfter > 0 {
		// Not bound to this call: it runs until the cluster is released,
		// its config changes or the provider stops.
		st.stopRedriver = startRedriver(context.WithoutCancel(ctx), st.client, st.key, p.opts.StuckPodAfter, p.log)
	}
	return st.client, nil
}

// stopRedriverLocked stops the cluster's redriver, if any. The caller
// holds st.mu.
func (st *clusterState) stopRedriverLocked() {
	if st.stopRedriver != nil {
		st.stopRedriver()
		st.stopRedriver = nil
	}
}

// lockCluster returns the locked state of the cluster with key, made if new.
func (p *Provider) lockCluster(key string) (*clusterState, error) {
	dir, err := p.clusterDir(key)
	if err != nil {
		return nil, err
	}
	for {
		p.mu.Lock()
		st, ok := p.clusters[key]
		if !ok {
			st = &clusterState{key: key, procName: procName(key), dir: dir}
			p.clusters[key] = st
		}
		p.mu.Unlock()
		st.mu.Lock()
		if !st.released {
			return st, nil
		}
		// Released meanwhile: take the new state.
		st.mu.Unlock()
	}
}

// startLocked writes kwok's files, starts it and waits until it serves.
// The caller holds st.mu.
func (p *Provider) startLocked(ctx context.Context, st *clusterState, cluster nodeprovider.Cluster) error {
	path, err := p.opts.Binaries.Path(binaries.Kwok)
	if err != nil {
		return fmt.Errorf("starting kwok for cluster %s: %w", st.key, err)
	}
	ports, err := supervisor.FreePorts(1)
	if err != nil {
		return fmt.Errorf("starting kwok for cluster %s: %w", st.key, err)
	}
	kubeconfigPath, configPath, err := writeFiles(st.dir, cluster.Config, cluster.PodCIDR, p.opts.NodeIP)
	if err != nil {
		return fmt.Errorf("starting kwok for cluster %s: %w", st.key, err)
	}
	// No kwok process of this cluster runs now: the Leases of its nodes
	// belong to a dead one, if any, and would hold the new one back (see
	// leases.go). Likewise before the supervisor restarts a kwok that died.
	client := st.client // this kwok's cluster config; a new one restarts kwok
	dropLeases := func(ctx context.Context) error { return p.dropLeases(ctx, client, cluster) }
	if err := dropLeases(ctx); err != nil {
		// kwok still takes the leases, once they expire.
		p.log.Warn("deleting node leases failed", "cluster", st.key, "error", err)
	}
	certFile, keyFile := p.writeServingCert(ctx, st, cluster)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logPath := filepath.Join(st.dir, "kwok.log")
	proc, err := p.procs.Start(ctx, supervisor.Spec{
		Name:          st.procName,
		Path:          path,
		Args:          args(kubeconfigPath, configPath, "127.0.0.1", ports[0], certFile, keyFile),
		LogPath:       logPath,
		Ready:         supervisor.WaitHTTPReady("http://"+addr+"/healthz", nil),
		GracePeriod:   stopGracePeriod,
		BeforeRestart: dropLeases,
	})
	if err != nil {
		return fmt.Errorf("starting kwok for cluster %s: %w", st.key, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	if err := proc.WaitReady(waitCtx); err != nil {
		stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 2*stopGracePeriod)
		defer stopCancel()
		if stopErr := p.procs.Stop(stopCtx, st.procName); stopErr != nil {
			p.log.Warn("stopping kwok that did not start failed", "cluster", st.key, "error", stopErr)
		}
		return fmt.Errorf("starting kwok for cluster %s (log %s): %w", st.key, logPath, err)
	}
	st.proc = proc
	p.log.Info("kwok started", "cluster", st.key, "pid", proc.Pid(), "address", addr, "log", logPath)
	return nil
}

// runWorkload has kwok run for a hosted cluster in the management cluster.
// The caller holds st.mu.
func (p *Provider) runWorkload(ctx context.Context, st *clusterState, cluster nodeprovider.Cluster) error {
	if p.opts.Workloads == nil {
		return fmt.Errorf("kwok for cluster %s: its control plane is hosted and this manager runs no hosted runtime", st.key)
	}
	kubeconfig, err := clientcmd.Write(*kubeconfigFor(cluster.Config))
	if err != nil {
		return fmt.Errorf("kwok for cluster %s: kubeconfig: %w", st.key, err)
	}
	config, err := renderConfig(cluster.PodCIDR, p.opts.NodeIP)
	if err != nil {
		return fmt.Errorf("kwok for cluster %s: %w", st.key, err)
	}
	// As before a process starts (see leases.go): Leases of a kwok that is
	// replaced would hold the new one back.
	if err := p.dropLeases(ctx, st.client, cluster); err != nil {
		p.log.Warn("deleting node leases failed", "cluster", st.key, "error", err)
	}
	files := map[string][]byte{workloadKubeconfig: kubeconfig, workloadConfig: config}
	if err := p.opts.Workloads.RunKwok(ctx, st.key, files, workloadArgs()); err != nil {
		return fmt.Errorf("kwok for cluster %s: %w", st.key, err)
	}
	p.log.Info("kwok runs as a workload of the management cluster", "cluster", st.key)
	return nil
}

// dropLeases deletes the node Leases a previous kwok of cluster held (see
// leases.go), saying how many.
func (p *Provider) dropLeases(ctx context.Context, client kubernetes.Interface, cluster nodeprovider.Cluster) error {
	n, err := deleteLeases(ctx, client, cluster)
	if err == nil && n > 0 {
		p.log.Info("deleted the node leases of a previous kwok", "cluster", cluster.Key, "leases", n)
	}
	return err
}

// writeServingCert writes the cluster's loopback kubelet certificate for
// kwok's server and returns its files; none (kwok's self-signed one) when
// the cluster has none to give.
func (p *Provider) writeServingCert(ctx context.Context, st *clusterState, cluster nodeprovider.Cluster) (certFile, keyFile string) {
	if cluster.LoopbackKubeletCert == nil {
		return "", ""
	}
	cert, key, err := cluster.LoopbackKubeletCert(ctx)
	if err == nil {
		certFile, keyFile = filepath.Join(st.dir, "serving.crt"), filepath.Join(st.dir, "serving.key")
		if err = os.WriteFile(certFile, cert, 0o600); err == nil {
			err = os.WriteFile(keyFile, key, 0o600)
		}
	}
	if err != nil {
		p.log.Warn("kwok serves a self-signed certificate: metrics-server cannot scrape its nodes", "cluster", st.key, "error", err)
		return "", ""
	}
	return certFile, keyFile
}

// clusterDir returns DataDir/<namespace>/<name>/kwok of the cluster with key.
func (p *Provider) clusterDir(key string) (string, error) {
	if p.opts.DataDir == "" {
		return "", errors.New("kwok provider: no data directory")
	}
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") || ns == ".." || name == ".." || ns == "." || name == "." {
		return "", fmt.Errorf("cluster key %q is not namespace/name", key)
	}
	return filepath.Join(p.opts.DataDir, ns, name, "kwok"), nil
}

// getNode returns the Node of providerID if this provider made it in cluster.
func (p *Provider) getNode(ctx context.Context, client kubernetes.Interface, cluster nodeprovider.Cluster, providerID string) (*corev1.Node, error) {
	clusterName, nodeName, ok := parseProviderID(providerID)
	if !ok || clusterName != cluster.Name {
		return nil, &nodeprovider.NotFoundError{ProviderID: providerID}
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &nodeprovider.NotFoundError{ProviderID: providerID}
	}
	if err != nil {
		return nil, fmt.Errorf("getting node %s in cluster %s: %w", nodeName, cluster.Key, err)
	}
	if node.Spec.ProviderID != providerID || !ours(node, cluster) {
		return nil, &nodeprovider.NotFoundError{ProviderID: providerID}
	}
	return node, nil
}

// nodeFor returns the Node to create for spec: the template, marked as
// kwok's and this provider's, with its idle usage (IdleUsage of its
// capacity, unless the template says).
func nodeFor(cluster nodeprovider.Cluster, spec nodeprovider.NodeSpec) *corev1.Node {
	node := spec.Template.DeepCopy()
	node.ResourceVersion, node.UID = "", ""
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[AnnotationNode] = AnnotationNodeValue
	node.Annotations[AnnotationMachine] = spec.MachineName
	node.Annotations[AnnotationResourceMetricsPath] = ResourceMetricsPath(node.Name)
	cpu, memory := IdleUsage(node.Status.Capacity)
	for key, q := range map[string]resource.Quantity{AnnotationIdleUsageCPU: cpu, AnnotationIdleUsageMemory: memory} {
		if _, set := node.Annotations[key]; !set {
			node.Annotations[key] = q.String()
		}
	}
	node.Spec.ProviderID = ProviderID(cluster.Name, node.Name)
	return node
}

// ours reports whether node is one this provider made in cluster.
func ours(node *corev1.Node, cluster nodeprovider.Cluster) bool {
	return node.Annotations[AnnotationNode] == AnnotationNodeValue &&
		node.Annotations[AnnotationMachine] != "" &&
		strings.HasPrefix(node.Spec.ProviderID, ProviderIDPrefix+cluster.Name+"/")
}

func instanceOf(node *corev1.Node) nodeprovider.Instance {
	return nodeprovider.Instance{
		ProviderID:  node.Spec.ProviderID,
		NodeName:    node.Name,
		MachineName: node.Annotations[AnnotationMachine],
		State:       nodeprovider.InstanceRunning,
	}
}

// running reports whether proc is supervised (running, starting or
// waiting to be restarted).
func running(proc *supervisor.Process) bool {
	if proc == nil {
		return false
	}
	switch proc.State() {
	case supervisor.Stopped, supervisor.Failed:
		return false
	}
	return true
}

func procName(clusterKey string) string { return "kwok/" + clusterKey }

func newClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = clientQPS, clientBurst
	c.UserAgent = "fke-kwok-provider"
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("making client: %w", err)
	}
	return client, nil
}

// fingerprint identifies the API server and credentials of cfg: when it
// changes, the client and kwok's kubeconfig are made again.
func fingerprint(cfg *rest.Config) string {
	h := sha256.New()
	for _, part := range []string{
		cfg.Host, cfg.ServerName, cfg.CAFile, string(cfg.CAData),
		cfg.CertFile, string(cfg.CertData), cfg.KeyFile, string(cfg.KeyData),
		cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password,
	} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
