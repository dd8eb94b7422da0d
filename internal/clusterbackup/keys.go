package clusterbackup

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/pki"
)

// Annotations of a restore-keys Secret: what a cluster restored from the
// snapshots of a deleted cluster takes from it.
const (
	AnnotationKeysVersion     = "fke.dev/version"
	AnnotationKeysServiceCIDR = "fke.dev/service-cidr"
)

// EnsureRestoreKeys keeps the CAs and keys of cl (bundle) in the Secret
// backup.KeysSecretName(cl.UID) of its namespace, with no owner: its
// snapshots can then be restored after cl is deleted. The Secret is
// encrypted at rest like every Secret of the management plane. Called
// after each snapshot; one GET when nothing changed.
func EnsureRestoreKeys(ctx context.Context, c client.Client, cl *fkev1.Cluster, bundle pki.Bundle) error {
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cl.Namespace, Name: backup.KeysSecretName(string(cl.UID)),
			Labels: map[string]string{fkev1.LabelCluster: cl.Name},
			Annotations: map[string]string{
				AnnotationKeysVersion: cl.Spec.Version, AnnotationKeysServiceCIDR: cl.Spec.Network.ServiceCIDR,
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: bundle,
	}
	if b := cl.Spec.Backup; b != nil && b.S3 != nil {
		store, err := json.Marshal(b.S3)
		if err != nil {
			return err
		}
		want.Annotations[AnnotationKeysS3] = string(store)
	}
	got := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil {
			return fmt.Errorf("keeping the keys of %s's snapshots: %w", cl.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the keys of %s's snapshots: %w", cl.Name, err)
	}
	if maps.EqualFunc(got.Data, want.Data, func(a, b []byte) bool { return string(a) == string(b) }) &&
		maps.Equal(got.Annotations, want.Annotations) {
		return nil
	}
	got.Data, got.Annotations, got.Labels = want.Data, want.Annotations, want.Labels
	if err := c.Update(ctx, got); err != nil {
		return fmt.Errorf("keeping the keys of %s's snapshots: %w", cl.Name, err)
	}
	return nil
}
