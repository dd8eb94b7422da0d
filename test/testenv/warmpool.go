package testenv

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controller/cluster"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/pki"
)

// StandbyPlanes returns the warm pool's unclaimed standby planes: id ->
// the plane's CA certificate.
func (e *Env) StandbyPlanes() (map[string][]byte, error) {
	var list corev1.SecretList
	if err := e.Client().List(context.Background(), &list, client.InNamespace(manager.DefaultSystemNamespace), client.HasLabels{cluster.LabelStandbyPlane}); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, s := range list.Items {
		if s.Labels[cluster.LabelClaimedBy] == "" {
			out[s.Labels[cluster.LabelStandbyPlane]] = s.Data[pki.CACertFile]
		}
	}
	return out, nil
}

// PoolStatus returns the warm pool's status as the manager records it
// (ConfigMap fke-system/warm-pool).
func (e *Env) PoolStatus() (map[string]string, error) {
	cm := &corev1.ConfigMap{}
	if err := e.Client().Get(context.Background(), client.ObjectKey{Namespace: manager.DefaultSystemNamespace, Name: cluster.PoolStatusConfigMap}, cm); err != nil {
		return nil, err
	}
	return cm.Data, nil
}
