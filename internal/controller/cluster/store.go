package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/backup/s3store"
)

// AnnotationKeysS3 on a restore-keys Secret is the JSON of the S3 store
// (spec.backup.s3) the cluster's snapshots went to: a snapshot of a
// deleted cluster whose local copy is gone is found there.
const AnnotationKeysS3 = "fke.dev/backup-s3"

// OpenStore returns the folder of the snapshots of cluster
// namespace/name in the store of spec, with the credentials of the Secret
// spec.secretRef names (in namespace).
func OpenStore(ctx context.Context, c client.Reader, namespace, name string, spec *fkev1.S3Store) (backup.Remote, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: namespace, Name: spec.SecretRef.Name}
	if err := c.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return backup.Remote{}, fmt.Errorf("the S3 credentials: Secret %s not found (create it with keys %s and %s)", key, fkev1.S3AccessKeyIDKey, fkev1.S3SecretAccessKeyKey)
		}
		return backup.Remote{}, fmt.Errorf("reading the S3 credentials (Secret %s): %w", key, err)
	}
	var missing []string
	for _, k := range []string{fkev1.S3AccessKeyIDKey, fkev1.S3SecretAccessKeyKey} {
		if len(secret.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return backup.Remote{}, fmt.Errorf("the S3 credentials: Secret %s has no %s (it has: %s)", key, strings.Join(missing, " or "), orNone(slices.Sorted(maps.Keys(secret.Data))))
	}
	region := spec.Region
	if region == "" {
		region = fkev1.S3DefaultRegion
	}
	st, err := s3store.New(s3store.Config{
		Endpoint: spec.Endpoint, Bucket: spec.Bucket, Region: region,
		AccessKeyID:     strings.TrimSpace(string(secret.Data[fkev1.S3AccessKeyIDKey])),
		SecretAccessKey: strings.TrimSpace(string(secret.Data[fkev1.S3SecretAccessKeyKey])),
		SessionToken:    strings.TrimSpace(string(secret.Data[fkev1.S3SessionTokenKey])),
		CABundle:        spec.CABundle, InsecureSkipTLSVerify: spec.InsecureSkipTLSVerify,
	})
	if err != nil {
		return backup.Remote{}, err
	}
	prefix := spec.Prefix
	if prefix == "" {
		prefix = fkev1.S3DefaultPrefix
	}
	return backup.Remote{Store: st, Prefix: backup.ClusterPrefix(prefix, namespace, name)}, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no keys"
	}
	return strings.Join(s, ", ")
}

// restoreSource says where the snapshots of cluster name (in namespace)
// are kept besides the data directory, and the checksum the management
// plane recorded of snapshot: from the Cluster while it exists, else from
// the restore-keys Secret its last snapshot left.
func (r *Reconciler) restoreSource(ctx context.Context, namespace, name, snapshot string) (store *fkev1.S3Store, sha256 string, err error) {
	src := &fkev1.Cluster{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, src)
	switch {
	case err == nil:
		if src.Spec.Backup != nil {
			store = src.Spec.Backup.S3
		}
		for _, b := range src.Status.Backups {
			if b.Name == snapshot {
				sha256 = b.SHA256
			}
		}
		return store, sha256, nil
	case !apierrors.IsNotFound(err):
		return nil, "", fmt.Errorf("reading cluster %s: %w", name, err)
	}
	var keys corev1.SecretList
	if err := r.Client.List(ctx, &keys, client.InNamespace(namespace), client.MatchingLabels{fkev1.LabelCluster: name}); err != nil {
		return nil, "", fmt.Errorf("looking for the snapshots of %s: %w", name, err)
	}
	var newest *corev1.Secret
	for i := range keys.Items {
		k := &keys.Items[i]
		if strings.HasPrefix(k.Name, backup.KeysSecretName("")) && (newest == nil || k.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = k
		}
	}
	if newest == nil || newest.Annotations[AnnotationKeysS3] == "" {
		return nil, "", nil
	}
	store = &fkev1.S3Store{}
	if err := json.Unmarshal([]byte(newest.Annotations[AnnotationKeysS3]), store); err != nil {
		return nil, "", fmt.Errorf("the S3 store of %s's snapshots (Secret %s): %w", name, newest.Name, err)
	}
	return store, "", nil
}

// restoreSnapshot returns snapshot from.Snapshot of cluster from.Cluster
// (in cl's namespace) that cl is restored from, checked against its
// checksum, and the path of its data: the local copy, or else a copy
// downloaded from the source cluster's S3 store (and kept in the data
// directory).
func (r *Reconciler) restoreSnapshot(ctx context.Context, cl *fkev1.Cluster, from *fkev1.ClusterRestore) (backup.Snapshot, string, error) {
	namespace := cl.Namespace
	dir := r.backupDir(namespace, from.Cluster)
	store, want, err := r.restoreSource(ctx, namespace, from.Cluster, from.Snapshot)
	if err != nil {
		return backup.Snapshot{}, "", err
	}
	snap, lerr := backup.Verify(dir, from.Snapshot)
	if lerr == nil && want != "" && snap.SHA256 != want {
		lerr = fmt.Errorf("snapshot %s records sha256 %s, but was taken with %s: %w", from.Snapshot, snap.SHA256, want, backup.ErrChecksum)
	}
	if lerr == nil {
		return snap, dir.File(snap.Name), nil
	}
	if store == nil {
		return backup.Snapshot{}, "", lerr
	}
	rem, err := OpenStore(ctx, r.Client, namespace, from.Cluster, store)
	if err == nil {
		snap, err = backup.Download(ctx, rem, from.Snapshot, dir, want)
	}
	if err != nil {
		return backup.Snapshot{}, "", fmt.Errorf("the local copy: %v; the copy in the S3 store: %w", lerr, err)
	}
	r.Recorder.Eventf(cl, nil, corev1.EventTypeNormal, "SnapshotDownloaded", "Restore", "downloaded snapshot %s of %s from %s and checked its checksum (sha256 %s)", snap.Name, from.Cluster, rem, snap.SHA256)
	return snap, dir.File(snap.Name), nil
}

// BackupRecords is status.backups: the snapshots kept locally (local) and
// in the S3 store (remote), oldest first. remoteKnown says remote was
// read; when it was not (the store did not answer), what prev said of the
// store is kept.
func BackupRecords(prev []fkev1.BackupRecord, local, remote []backup.Snapshot, remoteKnown bool) []fkev1.BackupRecord {
	byName := map[string]*fkev1.BackupRecord{}
	add := func(s backup.Snapshot, where fkev1.BackupLocation) {
		rec := byName[s.Name]
		if rec == nil {
			rec = &fkev1.BackupRecord{Name: s.Name, Time: metav1.NewTime(s.Time), Size: s.Size, SHA256: s.SHA256, Revision: s.Revision}
			byName[s.Name] = rec
		}
		if !slices.Contains(rec.Locations, where) {
			rec.Locations = append(rec.Locations, where)
		}
	}
	for _, s := range local {
		add(s, fkev1.BackupLocal)
	}
	if !remoteKnown {
		for _, p := range prev {
			if slices.Contains(p.Locations, fkev1.BackupS3) {
				remote = append(remote, backup.Snapshot{Name: p.Name, Time: p.Time.Time, Size: p.Size, SHA256: p.SHA256, Revision: p.Revision})
			}
		}
	}
	for _, s := range remote {
		add(s, fkev1.BackupS3)
	}
	out := make([]fkev1.BackupRecord, 0, len(byName))
	for _, rec := range byName {
		sort.Slice(rec.Locations, func(i, j int) bool { return rec.Locations[i] < rec.Locations[j] })
		out = append(out, *rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
