package clusterbackup

import (
	"context"
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
