// Package admission is fke-manager's validating admission webhook for the
// fke.dev kinds: the checks the CRD schema's CEL rules cannot make, because
// they need other objects (the pool's cluster and instance type, the
// cluster's other pools, other clusters with local nodes), what this
// installation runs (node providers, Kubernetes versions), or cost more
// than CEL allows (per-item regular expressions on unbounded strings). The
// rules are pure functions (labels.go, room.go, localranges.go, versions);
// the handlers read what they need and deny with a message that says what
// to fix.
package admission

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
)

// Paths the webhook server serves, one per kind.
const (
	PathCluster  = "/validate-fke-dev-v1alpha1-cluster"
	PathNodePool = "/validate-fke-dev-v1alpha1-nodepool"
)

// Validator holds what the checks read.
type Validator struct {
	// Reader reads Clusters, NodePools and InstanceTypes. Use a reader that
	// goes to the API server (not a cache): a pool created right after its
	// cluster must find it.
	Reader client.Reader
	// Providers returns the node providers this installation runs.
	Providers func() []fkev1.ProviderName
	decoder   ctrladmission.Decoder
}

// New returns a Validator decoding with scheme (which must hold the fke.dev kinds).
func New(scheme *runtime.Scheme, reader client.Reader, providers func() []fkev1.ProviderName) *Validator {
	return &Validator{Reader: reader, Providers: providers, decoder: ctrladmission.NewDecoder(scheme)}
}

// ClusterHandler validates Cluster creates and updates.
func (v *Validator) ClusterHandler() ctrladmission.Handler {
	return ctrladmission.HandlerFunc(func(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
		cl := &fkev1.Cluster{}
		if err := v.decoder.Decode(req, cl); err != nil {
			return ctrladmission.Errored(http.StatusBadRequest, err)
		}
		var old *fkev1.Cluster
		if len(req.OldObject.Raw) > 0 {
			old = &fkev1.Cluster{}
			if err := v.decoder.DecodeRaw(req.OldObject, old); err != nil {
				return ctrladmission.Errored(http.StatusBadRequest, err)
			}
		}
		msgs := CheckCluster(cl, old)
		if old != nil && old.Spec.Network.PodCIDR == "" && cl.Spec.Network.PodCIDR != "" {
			// The pod range of a cluster that may have local pools is chosen now.
			msg, err := v.checkLocalPodRange(ctx, cl, nil)
			if err != nil {
				return ctrladmission.Errored(http.StatusInternalServerError, err)
			}
			if msg != "" {
				msgs = append(msgs, "spec.network.podCIDR: "+msg)
			}
		}
		return respond(msgs)
	})
}

// CheckCluster returns why cl (an update of old, or a create when old is nil)
// is refused.
func CheckCluster(cl, old *fkev1.Cluster) []string {
	var out []string
	if old == nil || old.Spec.Version != cl.Spec.Version {
		if err := versions.CheckRunnable(cl.Spec.Version); err != nil {
			out = append(out, "spec.version: "+err.Error())
		}
	}
	if old != nil {
		if err := versions.CheckUpgrade(old.Spec.Version, cl.Spec.Version); err != nil {
			out = append(out, "spec.version: "+err.Error())
		}
	}
	if msg := CheckMaxNodes(cl); msg != "" && (old == nil || old.Spec.Autoscaling.MaxNodes != cl.Spec.Autoscaling.MaxNodes) {
		out = append(out, "spec.autoscaling: "+msg)
	}
	return out
}

// NodePoolHandler validates NodePool creates and updates.
func (v *Validator) NodePoolHandler() ctrladmission.Handler {
	return ctrladmission.HandlerFunc(func(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
		np := &fkev1.NodePool{}
		if err := v.decoder.Decode(req, np); err != nil {
			return ctrladmission.Errored(http.StatusBadRequest, err)
		}
		var old *fkev1.NodePool
		if len(req.OldObject.Raw) > 0 {
			old = &fkev1.NodePool{}
			if err := v.decoder.DecodeRaw(req.OldObject, old); err != nil {
				return ctrladmission.Errored(http.StatusBadRequest, err)
			}
		}
		if old == nil {
			legacy, err := v.renamedFrom(ctx, np)
			if err != nil {
				return ctrladmission.Errored(http.StatusInternalServerError, err)
			}
			old = legacy
		}
		msgs, err := v.checkNodePool(ctx, np, old)
		if err != nil {
			return ctrladmission.Errored(http.StatusInternalServerError, err)
		}
		return respond(msgs)
	})
}

// renamedFrom returns the pool np is a rename of, when np is the manager's
// copy of a pool made before per-cluster names (annotation
// fkev1.AnnotationRenamedFrom, same cluster): the copy is then checked as an
// update of that pool, so a rename never fails on a rule the original
// predates. nil when np is a plain create.
func (v *Validator) renamedFrom(ctx context.Context, np *fkev1.NodePool) (*fkev1.NodePool, error) {
	from := np.Annotations[fkev1.AnnotationRenamedFrom]
	if from == "" {
		return nil, nil
	}
	legacy := &fkev1.NodePool{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: np.Namespace, Name: from}, legacy)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading node pool %s: %w", from, err)
	case legacy.Spec.ClusterName != np.Spec.ClusterName || !legacy.Legacy():
		return nil, nil
	}
	return legacy, nil
}

// checkNodePool returns why np (an update of old, or a create when old is
// nil) is refused; an error when it could not read what it needs.
func (v *Validator) checkNodePool(ctx context.Context, np, old *fkev1.NodePool) ([]string, error) {
	// An update is checked only for what it changes, so that pools made
	// before a rule keep working (as the API server ratchets CRD rules).
	var msgs []string
	if old == nil || !maps.Equal(old.Spec.Labels, np.Spec.Labels) || !slices.EqualFunc(old.Spec.Taints, np.Spec.Taints, sameTaint) {
		msgs = PoolLabelsAndTaints(np.Spec.Labels, np.Spec.Taints)
	}
	if old == nil || old.Spec.Provider != np.Spec.Provider {
		if msg := CheckProvider(np.Spec.Provider, v.Providers()); msg != "" {
			msgs = append(msgs, msg)
		}
	}
	if old == nil || old.Spec.InstanceType != np.Spec.InstanceType {
		err := v.Reader.Get(ctx, client.ObjectKey{Name: np.Spec.InstanceType}, &fkev1.InstanceType{})
		switch {
		case apierrors.IsNotFound(err):
			msgs = append(msgs, fmt.Sprintf("spec.instanceType: instance type %q does not exist: list the available ones with `fke instancetypes` (or kubectl get instancetypes)", np.Spec.InstanceType))
		case err != nil:
			return nil, fmt.Errorf("reading instance type %s: %w", np.Spec.InstanceType, err)
		}
	}
	if np.Spec.Version != "" && (old == nil || old.Spec.Version != np.Spec.Version) {
		msg, err := v.checkPoolVersion(ctx, np)
		if err != nil {
			return nil, err
		}
		if msg != "" {
			msgs = append(msgs, msg)
		}
	}
	grows := old == nil || PoolMaximum(np.Spec) > PoolMaximum(old.Spec)
	if !grows {
		// Nothing below applies (the autoscaler's resizes end here).
		return msgs, nil
	}
	cl := &fkev1.Cluster{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: np.Namespace, Name: np.Spec.ClusterName}, cl)
	switch {
	case apierrors.IsNotFound(err):
		if old == nil {
			msgs = append(msgs, fmt.Sprintf("spec.clusterName: cluster %q does not exist in namespace %s: create it first (`fke cluster create %s`) or list the clusters with `fke cluster list`",
				np.Spec.ClusterName, np.Namespace, np.Spec.ClusterName))
		}
		return msgs, nil
	case err != nil:
		return nil, fmt.Errorf("reading cluster %s: %w", np.Spec.ClusterName, err)
	}
	if old == nil && !cl.DeletionTimestamp.IsZero() {
		msgs = append(msgs, fmt.Sprintf("spec.clusterName: cluster %q is being deleted: node pools cannot be added to it", cl.Name))
	}
	if old == nil && np.Spec.Provider == fkev1.ProviderLocal {
		msg, err := v.checkLocalPodRange(ctx, cl, np)
		if err != nil {
			return nil, err
		}
		if msg != "" {
			msgs = append(msgs, "spec.provider: "+msg)
		}
	}
	// Only a pool that may grow is checked for room (the autoscaler resizes
	// within maxSize without a check).
	msg, err := v.checkRoom(ctx, cl, np)
	if err != nil {
		return nil, err
	}
	if msg != "" {
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// checkPoolVersion checks a pool's pinned version: one this fke runs, and
// within the skew policy of its cluster's control plane (the version its
// spec asks for and, during an upgrade, the one it still runs).
func (v *Validator) checkPoolVersion(ctx context.Context, np *fkev1.NodePool) (string, error) {
	if err := versions.CheckRunnable(np.Spec.Version); err != nil {
		return "spec.version: " + err.Error(), nil
	}
	cl := &fkev1.Cluster{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: np.Namespace, Name: np.Spec.ClusterName}, cl)
	if apierrors.IsNotFound(err) {
		return "", nil // reported with the cluster name below
	}
	if err != nil {
		return "", fmt.Errorf("reading cluster %s: %w", np.Spec.ClusterName, err)
	}
	cp := versions.OrDefault(cl.Spec.Version)
	if up := cl.Status.Upgrade; up != nil && up.CompletionTime == nil && up.From != "" {
		cp = up.From
	}
	if err := versions.CheckKubeletSkew(cp, np.Spec.Version); err != nil {
		return "spec.version: " + err.Error(), nil
	}
	return "", nil
}

// checkRoom checks that cl's pod range holds its pools with np at its new size.
func (v *Validator) checkRoom(ctx context.Context, cl *fkev1.Cluster, np *fkev1.NodePool) (string, error) {
	if _, known := NodeRoom(cl.Spec.Network.PodCIDR); !known {
		return "", nil
	}
	var pools fkev1.NodePoolList
	if err := v.Reader.List(ctx, &pools, client.InNamespace(np.Namespace)); err != nil {
		return "", fmt.Errorf("listing node pools: %w", err)
	}
	sizes := map[string]int64{np.Name: PoolMaximum(np.Spec)}
	for _, p := range pools.Items {
		renamed := p.Name == np.Annotations[fkev1.AnnotationRenamedFrom] // the same pool under its old name
		if p.Spec.ClusterName == cl.Name && p.Name != np.Name && !renamed && p.DeletionTimestamp.IsZero() {
			sizes[p.Name] = PoolMaximum(p.Spec)
		}
	}
	return CheckRoom(cl, sizes), nil
}

// CheckProvider returns why provider is refused when this installation runs
// available, or "".
func CheckProvider(provider fkev1.ProviderName, available []fkev1.ProviderName) string {
	if provider == "" || slices.Contains(available, provider) {
		return ""
	}
	names := make([]string, 0, len(available))
	for _, p := range available {
		names = append(names, string(p))
	}
	slices.Sort(names)
	return fmt.Sprintf("spec.provider: node provider %q is not available in this installation; available providers: %s", provider, strings.Join(names, ", "))
}

func sameTaint(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
}

func respond(msgs []string) ctrladmission.Response {
	if len(msgs) == 0 {
		return ctrladmission.Allowed("")
	}
	return ctrladmission.Denied(strings.Join(msgs, "; "))
}
