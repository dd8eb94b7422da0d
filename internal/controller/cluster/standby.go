package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/clusterbackup"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/internal/warmpool"
)

// WarmPool configures the pool of standby control planes (see package
// warmpool): planes started before any cluster asks, that new clusters of
// the default version and ranges claim instead of starting their own.
type WarmPool struct {
	// Size is the number of unclaimed planes kept; 0 turns the pool off
	// (planes left by an earlier run with a pool are removed).
	Size int
	// Namespace holds each plane's Secret (its PKI, ports and shape) and
	// the pool's status ConfigMap.
	Namespace string
	// Interval between two looks at the pool (default 2s).
	Interval time.Duration
}

// Names of the standby planes' objects.
const (
	// LabelStandbyPlane names a standby plane's Secret: its value is the
	// plane's id.
	LabelStandbyPlane = "fke.dev/standby-plane"
	// LabelClaimedBy is set on a standby plane's Secret by the cluster
	// that claimed it (its UID), in the update that claims it: a plane is
	// claimed by one cluster at most, because the API server accepts only
	// one update of a given resourceVersion.
	LabelClaimedBy = "fke.dev/claimed-by"
	// PoolStatusConfigMap is the pool's state, for `fke status`.
	PoolStatusConfigMap = "warm-pool"

	annoVersion     = "fke.dev/version"
	annoServiceCIDR = "fke.dev/service-cidr"
	annoNodeAddress = "fke.dev/node-address"
	annoPodCIDR     = "fke.dev/pod-cidr"
	annoPorts       = "fke.dev/ports"

	// standbyDir is the runtime key prefix of standby planes; a dot keeps
	// it apart from every namespace name.
	standbyDir = ".standby"
)

func standbyKey(id string) string    { return standbyDir + "/" + id }
func standbySecret(id string) string { return "standby-" + id }

// shape is what the pool's planes are made for: the default version and
// service range, and this manager's node address.
func (r *Reconciler) shape() warmpool.Shape {
	return warmpool.Shape{Version: versions.Default, ServiceCIDR: fkev1.DefaultServiceCIDR, NodeAddress: r.NodeAddress}
}

func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// standbySecrets lists the planes' Secrets from the API server (not the
// cache: a plane claimed a moment ago must not look free).
func (r *Reconciler) standbySecrets(ctx context.Context) ([]corev1.Secret, error) {
	if r.Warm.Namespace == "" {
		return nil, nil
	}
	var list corev1.SecretList
	if err := r.reader().List(ctx, &list, client.InNamespace(r.Warm.Namespace), client.HasLabels{LabelStandbyPlane}); err != nil {
		return nil, fmt.Errorf("listing standby planes: %w", err)
	}
	return list.Items, nil
}

// planeOf reads a plane's Secret; ready is asked of the runtime.
func (r *Reconciler) planeOf(ctx context.Context, s *corev1.Secret) warmpool.Plane {
	id := s.Labels[LabelStandbyPlane]
	return warmpool.Plane{
		ID: id,
		Shape: warmpool.Shape{
			Version: s.Annotations[annoVersion], ServiceCIDR: s.Annotations[annoServiceCIDR], NodeAddress: s.Annotations[annoNodeAddress],
		},
		PodCIDR:   s.Annotations[annoPodCIDR],
		Ready:     r.localStatus(ctx, standbyKey(id)).Ready(),
		ClaimedBy: s.Labels[LabelClaimedBy],
		Created:   s.CreationTimestamp.Time,
	}
}

// planePorts reads the control-plane ports of a plane's Secret.
func planePorts(s *corev1.Secret) (fkev1.ClusterPorts, error) {
	var p fkev1.ClusterPorts
	if err := json.Unmarshal([]byte(s.Annotations[annoPorts]), &p); err != nil {
		return p, fmt.Errorf("standby plane %s: ports: %w", s.Name, err)
	}
	return p, nil
}

// standbySpec is the control-plane spec of a plane's Secret.
func standbySpec(s *corev1.Secret) (controlplane.Spec, error) {
	ports, err := planePorts(s)
	if err != nil {
		return controlplane.Spec{}, err
	}
	return controlplane.Spec{
		Key:         standbyKey(s.Labels[LabelStandbyPlane]),
		Version:     s.Annotations[annoVersion],
		Ports:       clusterbackup.PortsOf(ports),
		PodCIDR:     s.Annotations[annoPodCIDR],
		ServiceCIDR: s.Annotations[annoServiceCIDR],
		PKI:         pki.Bundle(s.Data),
		NodeAddress: s.Annotations[annoNodeAddress],
		Standby:     true,
	}, nil
}

// claimStandby gives cl a standby plane when the pool has one that fits:
// it claims the plane, records the plane's pod range, ports and PKI as
// cl's, and adopts its running processes. Each step is idempotent, so a
// claim cut short (a crash) is finished by the next reconcile. It does
// nothing for a cluster that fits no plane; cl then starts cold.
func (r *Reconciler) claimStandby(ctx context.Context, cl *fkev1.Cluster) error {
	if cl.Spec.Runtime != fkev1.RuntimeLocal || r.Warm.Namespace == "" {
		return nil
	}
	mine, err := r.pendingClaim(ctx, cl)
	if err != nil || (mine == nil && cl.Status.Ports.APIServer != 0) {
		return err // provisioned, cold or from a plane, with no claim left to finish
	}
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	if mine != nil {
		return r.finishClaim(ctx, cl, mine)
	}
	secrets, err := r.standbySecrets(ctx)
	if err != nil || len(secrets) == 0 {
		return err
	}
	req := warmpool.Request{
		Shape:   warmpool.Shape{Version: cl.Spec.Version, ServiceCIDR: cl.Spec.Network.ServiceCIDR, NodeAddress: r.NodeAddress},
		PodCIDR: cl.Spec.Network.PodCIDR,
		Restore: cl.Spec.RestoreFrom != nil,
	}
	if !req.Restore {
		err := r.reader().Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.PKISecretName(cl.Name)}, &corev1.Secret{})
		switch {
		case err == nil:
			req.Provisioned = true
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("getting PKI secret: %w", err)
		}
	}
	planes := make([]warmpool.Plane, len(secrets))
	for i := range secrets {
		planes[i] = r.planeOf(ctx, &secrets[i])
	}
	p, ok := warmpool.Pick(planes, req)
	if !ok {
		return nil
	}
	for i := range secrets {
		s := &secrets[i]
		if s.Labels[LabelStandbyPlane] != p.ID {
			continue
		}
		s.Labels[LabelClaimedBy] = string(cl.UID)
		if err := r.Client.Update(ctx, s); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				ctrllog.FromContext(ctx).Info("standby plane taken by another claim; starting cold", "plane", p.ID)
				return nil
			}
			return fmt.Errorf("claiming standby plane %s: %w", p.ID, err)
		}
		r.claims.Store(cl.UID, p.ID)
		return r.finishClaim(ctx, cl, s)
	}
	return nil
}

// pendingClaim returns the Secret of the plane cl claimed and has not
// finished taking (a claim cut short); nil when there is none. A claim made
// by this process is known before the cache shows it.
func (r *Reconciler) pendingClaim(ctx context.Context, cl *fkev1.Cluster) (*corev1.Secret, error) {
	if id, ok := r.claims.Load(cl.UID); ok {
		s := &corev1.Secret{}
		err := r.reader().Get(ctx, client.ObjectKey{Namespace: r.Warm.Namespace, Name: standbySecret(id.(string))}, s)
		if apierrors.IsNotFound(err) {
			r.claims.Delete(cl.UID)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("getting claimed standby plane %s: %w", id, err)
		}
		return s, nil
	}
	var list corev1.SecretList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.Warm.Namespace), client.MatchingLabels{LabelClaimedBy: string(cl.UID)}); err != nil {
		return nil, fmt.Errorf("listing standby planes: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// finishClaim makes the plane of s, claimed by cl, cl's control plane.
func (r *Reconciler) finishClaim(ctx context.Context, cl *fkev1.Cluster, s *corev1.Secret) error {
	id := s.Labels[LabelStandbyPlane]
	if cl.Spec.Network.PodCIDR == "" {
		before := cl.DeepCopy()
		cl.Spec.Network.PodCIDR = s.Annotations[annoPodCIDR]
		if err := r.Client.Patch(ctx, cl, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("recording the pod range of standby plane %s: %w", id, err)
		}
	}
	if cl.Status.Ports.APIServer == 0 {
		ports, err := planePorts(s)
		if err != nil {
			return err
		}
		before := cl.DeepCopy()
		cl.Status.Ports = ports
		if err := r.Client.Status().Patch(ctx, cl, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("recording the ports of standby plane %s: %w", id, err)
		}
	}
	key := client.ObjectKey{Namespace: cl.Namespace, Name: fkev1.PKISecretName(cl.Name)}
	if err := r.reader().Get(ctx, key, &corev1.Secret{}); apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, ownedSecret(cl, key.Name, s.Data)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing PKI secret from standby plane %s: %w", id, err)
		}
	} else if err != nil {
		return fmt.Errorf("getting PKI secret: %w", err)
	}
	if err := r.local().Adopt(ctx, standbyKey(id), client.ObjectKeyFromObject(cl).String()); err != nil {
		return err
	}
	if err := r.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing claimed standby plane %s from the pool: %w", id, err)
	}
	r.claims.Delete(cl.UID)
	r.cidrMu.Lock()
	delete(r.picked, standbyKey(id))
	r.cidrMu.Unlock()
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "StandbyClaimed", "Provision",
		"took standby control plane %s from the warm pool: its CAs, keys and data were made for no one else", id)
	r.kickPool()
	return nil
}

func (r *Reconciler) kickPool() {
	select {
	case r.poolKick <- struct{}{}:
	default:
	}
}

// standbyJanitor is what the pool needs of a runtime beyond
// controlplane.Runtime to clean up after a crash (the local runtime has
// it): the keys that hold data under a prefix, and the removal of the
// links Adopt leaves behind.
type standbyJanitor interface {
	Keys(prefix string) ([]string, error)
	ForgetAliases(prefix string) ([]string, error)
}

// RunPool keeps the warm pool at its size until ctx ends. The manager runs
// it (with leader election); planes are children of the manager and stop
// with it, and the next RunPool starts them again from their Secrets.
func (r *Reconciler) RunPool(ctx context.Context) error {
	lg := ctrllog.FromContext(ctx).WithName("warm-pool")
	interval := r.Warm.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if err := r.ensurePoolNamespace(ctx); err != nil {
		return err
	}
	r.poolMu.Lock()
	r.poolSince = time.Now().UTC().Truncate(time.Second)
	r.poolMu.Unlock()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		left, err := r.poolStep(ctx)
		if err != nil && ctx.Err() == nil {
			lg.Info("warm pool step failed", "error", err.Error())
		}
		if err == nil && left == 0 && r.Warm.Size == 0 {
			// Off, and nothing left from a run with a pool: no more steps
			// (each lists the API server).
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.poolKick:
		}
	}
}

func (r *Reconciler) ensurePoolNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Warm.Namespace}}
	if err := r.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s for the warm pool: %w", r.Warm.Namespace, err)
	}
	return nil
}

// poolStep starts the planes that should run, removes those the plan
// drops, starts one new plane when the plan says so, and records the
// pool's state. It returns how many planes the pool holds after it.
func (r *Reconciler) poolStep(ctx context.Context) (int, error) {
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	secrets, err := r.standbySecrets(ctx)
	if err != nil {
		return -1, err
	}
	var clusters fkev1.ClusterList
	if err := r.Client.List(ctx, &clusters); err != nil {
		return -1, fmt.Errorf("listing clusters: %w", err)
	}
	exists, busy := map[string]bool{}, false
	for _, c := range clusters.Items {
		exists[string(c.UID)] = true
		if c.DeletionTimestamp.IsZero() && r.runtime(&c) == r.local() && starting(r.localStatus(ctx, client.ObjectKeyFromObject(&c).String())) {
			busy = true
		}
	}
	var errs []error
	planes := make([]warmpool.Plane, 0, len(secrets))
	byID := map[string]*corev1.Secret{}
	for i := range secrets {
		s := &secrets[i]
		byID[s.Labels[LabelStandbyPlane]] = s
		if s.Labels[LabelClaimedBy] == "" {
			// Started again after a restart of the manager; a no-op
			// while it runs.
			if spec, err := standbySpec(s); err != nil {
				errs = append(errs, err)
			} else if _, err := r.local().Ensure(ctx, spec); err != nil {
				errs = append(errs, fmt.Errorf("starting standby plane %s: %w", s.Name, err))
			}
		}
		planes = append(planes, r.planeOf(ctx, s))
	}
	plan := warmpool.Decide(planes, r.shape(), r.Warm.Size, busy, exists)
	for _, id := range plan.Remove {
		if err := r.removePlane(ctx, byID[id]); err != nil {
			errs = append(errs, err)
		}
	}
	if plan.Start {
		s, err := r.startPlane(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		if s != nil {
			byID[s.Labels[LabelStandbyPlane]] = s
		}
	}
	errs = append(errs, r.pruneStandbyData(ctx, byID))
	errs = append(errs, r.recordPool(ctx, planes, plan))
	return len(byID) - len(plan.Remove), errors.Join(errs...)
}

// localStatus is the local runtime's status of key; the local runtime
// observes its own processes, so it has no error to report.
func (r *Reconciler) localStatus(ctx context.Context, key string) controlplane.Status {
	st, _ := r.local().Status(ctx, key)
	return st
}

// starting reports whether a component of a control plane runs and does
// not serve yet: it starts (created, restarted or upgraded) and wants the
// CPU. A control plane that does not run at all is not starting.
func starting(st controlplane.Status) bool {
	for _, c := range st.Components {
		if c.Running && !c.Ready {
			return true
		}
	}
	return false
}

// removePlane stops a plane, removes its data, then its Secret.
func (r *Reconciler) removePlane(ctx context.Context, s *corev1.Secret) error {
	id := s.Labels[LabelStandbyPlane]
	if err := r.local().Delete(ctx, standbyKey(id)); err != nil {
		return fmt.Errorf("removing standby plane %s: %w", id, err)
	}
	if err := r.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing standby plane %s: %w", id, err)
	}
	r.cidrMu.Lock()
	delete(r.picked, standbyKey(id))
	r.cidrMu.Unlock()
	ctrllog.FromContext(ctx).Info("standby plane removed", "plane", id)
	return nil
}

// pruneStandbyData removes standby data no Secret describes (a plane
// whose Secret was never written or already removed when the manager
// stopped) and the links adopted planes left.
func (r *Reconciler) pruneStandbyData(ctx context.Context, byID map[string]*corev1.Secret) error {
	j, ok := r.local().(standbyJanitor)
	if !ok {
		return nil
	}
	if _, err := j.ForgetAliases(standbyDir); err != nil {
		return fmt.Errorf("removing links of adopted standby planes: %w", err)
	}
	keys, err := j.Keys(standbyDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, key := range keys {
		id := key[len(standbyDir)+1:]
		if _, ok := byID[id]; ok {
			continue
		}
		errs = append(errs, r.local().Delete(ctx, key))
		ctrllog.FromContext(ctx).Info("removed standby data no plane describes", "plane", id)
	}
	return errors.Join(errs...)
}

// startPlane makes one standby plane: ports, a pod range and a PKI of its
// own, recorded in its Secret before anything starts, then its processes
// at low CPU priority. It returns the Secret once it is stored.
func (r *Reconciler) startPlane(ctx context.Context) (*corev1.Secret, error) {
	id := newPlaneID()
	shape := r.shape()
	ips, err := controlplane.APIServerIPs(shape.ServiceCIDR, shape.NodeAddress)
	if err != nil {
		return nil, err
	}
	bundle, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "fke-" + id, APIServerIPs: ips})
	if err != nil {
		return nil, fmt.Errorf("standby plane %s: %w", id, err)
	}
	enc, _, err := encryption.Ensure(nil)
	if err != nil {
		return nil, fmt.Errorf("standby plane %s: %w", id, err)
	}
	bundle[encryption.ConfigFile] = enc
	podCIDR, err := r.pickRange(ctx, standbyKey(id), shape.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("standby plane %s: %w", id, err)
	}
	ports, err := r.allocatePorts(ctx, fkev1.ClusterPorts{}, true)
	if err != nil {
		return nil, fmt.Errorf("standby plane %s: %w", id, err)
	}
	portsJSON, err := json.Marshal(ports)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Warm.Namespace, Name: standbySecret(id),
			Labels: map[string]string{LabelStandbyPlane: id},
			Annotations: map[string]string{
				annoVersion: shape.Version, annoServiceCIDR: shape.ServiceCIDR, annoNodeAddress: shape.NodeAddress,
				annoPodCIDR: podCIDR.String(), annoPorts: string(portsJSON),
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: bundle,
	}
	if err := r.Client.Create(ctx, s); err != nil {
		return nil, fmt.Errorf("recording standby plane %s: %w", id, err)
	}
	spec, err := standbySpec(s)
	if err != nil {
		return s, err
	}
	if _, err := r.local().Ensure(ctx, spec); err != nil {
		return s, fmt.Errorf("starting standby plane %s: %w", id, err)
	}
	ctrllog.FromContext(ctx).Info("standby plane starting", "plane", id, "apiServerPort", ports.APIServer, "podCIDR", podCIDR.String())
	return s, nil
}

// recordPool writes the pool's state into its ConfigMap when it changed.
func (r *Reconciler) recordPool(ctx context.Context, planes []warmpool.Plane, plan warmpool.Plan) error {
	ready, starting := 0, 0
	var readyIDs []string
	removed := map[string]bool{}
	for _, id := range plan.Remove {
		removed[id] = true
	}
	for _, p := range planes {
		if p.ClaimedBy != "" || removed[p.ID] {
			continue
		}
		if p.Ready {
			ready++
			readyIDs = append(readyIDs, p.ID)
		} else {
			starting++
		}
	}
	if plan.Start {
		starting++
	}
	data := map[string]string{
		"size": fmt.Sprint(r.Warm.Size), "ready": fmt.Sprint(ready), "starting": fmt.Sprint(starting),
		"version": r.shape().Version, "readyPlanes": strings.Join(slices.Sorted(slices.Values(readyIDs)), ","),
		// Which manager observed it: a status written before a restart of
		// the manager is told apart from one written after.
		"observedSince": r.poolSince.Format(time.RFC3339),
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: r.Warm.Namespace, Name: PoolStatusConfigMap}
	// Read from the API server: one ConfigMap is not worth a cache of
	// every ConfigMap (nor the right to list them all).
	if err := r.reader().Get(ctx, key, cm); apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: data}
		return r.Client.Create(ctx, cm)
	} else if err != nil {
		return err
	}
	if maps.Equal(cm.Data, data) {
		return nil
	}
	cm.Data = data
	return r.Client.Update(ctx, cm)
}

// newPlaneID returns 8 random lowercase letters and digits.
func newPlaneID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// standbyRanges returns the pod ranges of the standby planes.
func (r *Reconciler) standbyRanges(ctx context.Context) ([]netip.Prefix, error) {
	secrets, err := r.standbySecrets(ctx)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, s := range secrets {
		if p, err := netip.ParsePrefix(s.Annotations[annoPodCIDR]); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}
