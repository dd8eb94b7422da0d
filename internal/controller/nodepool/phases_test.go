package nodepool

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// TestPrerequisitesPhase: a pool waits for its cluster, its instance type
// and the cluster's readiness, each with a condition that names what is
// missing, and the pass ends there.
func TestPrerequisitesPhase(t *testing.T) {
	pool := func() *fkev1.NodePool {
		return &fkev1.NodePool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo.gpu"},
			Spec: fkev1.NodePoolSpec{ClusterName: "demo", PoolName: "gpu", InstanceType: "gpu-h100x8", Provider: fkev1.ProviderKwok}}
	}
	cluster := func(ready bool) *fkev1.Cluster {
		cl := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo"}}
		status := metav1.ConditionFalse
		if ready {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: fkev1.ConditionReady, Status: status, Reason: "Test"})
		return cl
	}
	it := &fkev1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100x8"}}
	for _, tc := range []struct {
		name    string
		cluster *fkev1.Cluster
		it      *fkev1.InstanceType
		reason  string
		message string
		after   time.Duration
	}{
		{"no cluster", nil, it, fkev1.ReasonClusterNotReady, "cluster demo does not exist", 5 * time.Second},
		{"no instance type", cluster(true), nil, fkev1.ReasonInvalidSpec, "instance type gpu-h100x8 does not exist", 30 * time.Second},
		{"cluster not ready", cluster(false), it, fkev1.ReasonClusterNotReady, "waiting for cluster demo to be ready", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := pool()
			objs := []client.Object{np}
			if tc.cluster != nil {
				objs = append(objs, tc.cluster)
			}
			if tc.it != nil {
				objs = append(objs, tc.it)
			}
			r := &Reconciler{Client: renameClient(t, interceptor.Funcs{}, objs...)}
			res, done, err := r.prerequisitesPhase(context.Background(), &pass{np: np})
			if err != nil || !done || res.RequeueAfter != tc.after {
				t.Fatalf("phase = %+v, done %v, %v; want the pass to end, back in %s", res, done, err, tc.after)
			}
			c := meta.FindStatusCondition(np.Status.Conditions, fkev1.ConditionReady)
			if c == nil || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("condition %+v, want %s saying %q", c, tc.reason, tc.message)
			}
		})
	}
}
