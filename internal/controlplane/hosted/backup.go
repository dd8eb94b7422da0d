package hosted

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/controlplane"
)

// Annotations of a tenant's namespace made from a snapshot.
const (
	// AnnotationRestorePending names the snapshot whose keys are still to
	// be imported: until they are, the API server does not start and no
	// endpoint is reported (so the caller keeps passing Spec.Restore).
	AnnotationRestorePending = "fke.dev/restore-pending"
	// AnnotationRestored names the snapshot the tenant's data came from.
	AnnotationRestored = "fke.dev/restored-from"
)

// Snapshot exports the tenant's keys (backup.FormatKeys) as its API
// server sees them: from its own etcd, or from its prefix of the shared
// one with its own credentials, which can read nothing else. The export
// is consistent at one revision.
func (r *Runtime) Snapshot(ctx context.Context, spec controlplane.Spec, d backup.Dir, now time.Time, uid string) (backup.Snapshot, error) {
	ns := Namespace(spec.Key)
	nsObj := &corev1.Namespace{}
	if err := r.c.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		return backup.Snapshot{}, fmt.Errorf("getting namespace %s: %w", ns, err)
	}
	cli, prefix, err := r.tenantDatastore(ctx, ns, nsObj.Annotations[AnnotationDatastore])
	if err != nil {
		return backup.Snapshot{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	snap, err := backup.TakeKeys(ctx, cli, prefix, d, now, uid)
	if err != nil {
		return backup.Snapshot{}, fmt.Errorf("exporting the keys of %s: %w", spec.Key, err)
	}
	return snap, nil
}

// tenantDatastore connects to the tenant's data with its API server's
// credentials (the Secret of its namespace) and returns the client and
// the API server's key prefix.
func (r *Runtime) tenantDatastore(ctx context.Context, ns, datastore string) (*clientv3.Client, string, error) {
	secret := &corev1.Secret{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: SecretName}, secret); err != nil {
		return nil, "", fmt.Errorf("getting Secret %s/%s: %w", ns, SecretName, err)
	}
	etcdNS, etcdName, prefix := ns, EtcdService, backup.APIServerPrefix
	if datastore == Shared {
		etcdNS, etcdName, prefix = r.opts.SystemNamespace, SharedEtcdName, Prefix(ns)
	}
	cli, err := r.etcdClient(ctx, etcdNS, etcdName, secret.Data[datastoreCA], secret.Data[datastoreCert], secret.Data[datastoreKey])
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the datastore of %s: %w", ns, err)
	}
	return cli, prefix, nil
}

// restoreState says where a tenant made from a snapshot stands: restore
// (the keys of spec.Restore are to be imported before the API server
// starts) or an error when the import waits for a snapshot the caller did
// not pass. A tenant whose API server was ever started is never restored
// over.
func (r *Runtime) restoreState(ctx context.Context, nsObj *corev1.Namespace, spec controlplane.Spec) (restore bool, err error) {
	pending := nsObj.Annotations[AnnotationRestorePending]
	switch {
	case pending != "" && spec.Restore == "":
		return false, fmt.Errorf("control plane %s waits for snapshot %s to be restored, and none was given", spec.Key, pending)
	case pending != "":
		return true, nil
	case spec.Restore == "" || nsObj.Annotations[AnnotationRestored] != "":
		return false, nil
	}
	err = r.c.Get(ctx, client.ObjectKey{Namespace: nsObj.Name, Name: controlplane.APIServer}, &appsv1.Deployment{})
	switch {
	case err == nil:
		return false, nil // started before: its data is its own
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("getting Deployment %s/%s: %w", nsObj.Name, controlplane.APIServer, err)
	}
	return true, r.annotate(ctx, nsObj, AnnotationRestorePending, filepath.Base(spec.Restore))
}

// importSnapshot imports spec.Restore into the tenant's datastore once it
// serves (errStarting until then) and records that it did.
func (r *Runtime) importSnapshot(ctx context.Context, nsObj *corev1.Namespace, spec controlplane.Spec) error {
	cli, prefix, err := r.tenantDatastore(ctx, nsObj.Name, nsObj.Annotations[AnnotationDatastore])
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	n, err := backup.ImportKeys(ctx, cli, spec.Restore, prefix)
	if err != nil {
		return fmt.Errorf("restoring %s from %s: %w", spec.Key, filepath.Base(spec.Restore), err)
	}
	r.log.Info("tenant data restored from a snapshot", "cluster", spec.Key, "snapshot", filepath.Base(spec.Restore), "keys", n, "took", time.Since(start).Round(time.Millisecond))
	if err := r.annotate(ctx, nsObj, AnnotationRestored, filepath.Base(spec.Restore)); err != nil {
		return err
	}
	return r.annotate(ctx, nsObj, AnnotationRestorePending, "")
}

// annotate sets (value "": removes) annotation key of nsObj.
func (r *Runtime) annotate(ctx context.Context, nsObj *corev1.Namespace, key, value string) error {
	if nsObj.Annotations[key] == value {
		return nil
	}
	patch := client.MergeFrom(nsObj.DeepCopy())
	if value == "" {
		delete(nsObj.Annotations, key)
	} else {
		if nsObj.Annotations == nil {
			nsObj.Annotations = map[string]string{}
		}
		nsObj.Annotations[key] = value
	}
	if err := r.c.Patch(ctx, nsObj, patch); err != nil {
		return fmt.Errorf("annotating namespace %s: %w", nsObj.Name, err)
	}
	return nil
}

var _ controlplane.InPlaceRestorer = (*Runtime)(nil)

// componentsGone is how long RestoreInPlace waits for the components'
// pods to end (the API server's grace period is 30 s).
const componentsGone = 2 * time.Minute

// RestoreInPlace scales the tenant's API server, controller manager and
// scheduler to zero, waits until none of their pods is left (nothing
// writes while the keys are replaced), and imports snapshot's keys into
// its datastore, which keeps running. The next Ensure scales the
// components back.
func (r *Runtime) RestoreInPlace(ctx context.Context, spec controlplane.Spec, snapshot string) error {
	ns := Namespace(spec.Key)
	nsObj := &corev1.Namespace{}
	if err := r.c.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		return fmt.Errorf("getting namespace %s: %w", ns, err)
	}
	if err := r.Stop(ctx, spec.Key); err != nil {
		return err
	}
	sel, err := labels.Parse(LabelComponent + " in (" + strings.Join(controlplane.Components[1:], ",") + ")")
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, componentsGone)
	defer cancel()
	var left int
	err = wait.PollUntilContextCancel(wctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := r.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return false, nil
		}
		left = len(pods.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("restoring %s in place: %d pods of its components still run after %s: %w", spec.Key, left, componentsGone, err)
	}
	cli, prefix, err := r.tenantDatastore(ctx, ns, nsObj.Annotations[AnnotationDatastore])
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	n, err := backup.ImportKeys(ctx, cli, snapshot, prefix)
	if err != nil {
		return fmt.Errorf("restoring %s in place from %s: %w", spec.Key, filepath.Base(snapshot), err)
	}
	r.log.Info("tenant data restored in place", "cluster", spec.Key, "snapshot", filepath.Base(snapshot), "keys", n, "took", time.Since(start).Round(time.Millisecond))
	return r.annotate(ctx, nsObj, AnnotationRestored, filepath.Base(snapshot))
}
