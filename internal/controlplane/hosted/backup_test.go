package hosted

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"fke.dev/fke/internal/controlplane"
)

// TestRestoreState: a tenant made from a snapshot holds its API server back
// until the keys are in, and keeps holding it when a later call no longer
// passes the snapshot; a tenant whose API server ever ran, or that was
// restored already, is never restored over.
func TestRestoreState(t *testing.T) {
	const key, snap = "team/a", "/backups/team/src/20261202T100000Z.db"
	ns := Namespace(key)
	tests := []struct {
		name        string
		annotations map[string]string
		apiServer   bool
		restore     string
		want        bool
		wantErr     string
		wantPending string
	}{
		{name: "a new tenant from a snapshot", restore: snap, want: true, wantPending: "20261202T100000Z.db"},
		{name: "a new tenant, no snapshot", restore: ""},
		{name: "import pending, snapshot passed again", annotations: map[string]string{AnnotationRestorePending: "20261202T100000Z.db"}, restore: snap, want: true, wantPending: "20261202T100000Z.db"},
		{name: "import pending, no snapshot passed", annotations: map[string]string{AnnotationRestorePending: "20261202T100000Z.db"}, wantErr: "waits for snapshot 20261202T100000Z.db", wantPending: "20261202T100000Z.db"},
		{name: "restored already", annotations: map[string]string{AnnotationRestored: "20261202T100000Z.db"}, restore: snap},
		{name: "its API server ran before", apiServer: true, restore: snap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Annotations: map[string]string{AnnotationCluster: key}}}
			for k, v := range tt.annotations {
				nsObj.Annotations[k] = v
			}
			objs := []client.Object{nsObj}
			if tt.apiServer {
				objs = append(objs, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplane.APIServer}})
			}
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build()
			r, err := New(Options{Client: c, Registry: "registry.test/fke"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.restoreState(context.Background(), nsObj, controlplane.Spec{Key: key, Restore: tt.restore})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one that says %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("restore = %v, want %v", got, tt.want)
			}
			stored := &corev1.Namespace{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: ns}, stored); err != nil {
				t.Fatal(err)
			}
			if p := stored.Annotations[AnnotationRestorePending]; p != tt.wantPending {
				t.Errorf("pending annotation %q, want %q", p, tt.wantPending)
			}
		})
	}
}

// TestStatusHidesEndpointWhileRestoring: no endpoint is reported before the
// snapshot's keys are in, so the caller keeps passing the snapshot.
func TestStatusHidesEndpointWhileRestoring(t *testing.T) {
	const key = "team/a"
	ns := Namespace(key)
	svc := apiServerService(ns, 30443)
	svc.Spec.Ports[0].NodePort = 30443
	for _, pending := range []bool{true, false} {
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Annotations: map[string]string{AnnotationCluster: key}}}
		if pending {
			nsObj.Annotations[AnnotationRestorePending] = "20261202T100000Z.db"
		}
		c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(nsObj, svc.DeepCopy()).Build()
		r, err := New(Options{Client: c, Registry: "registry.test/fke", EndpointHost: "172.29.0.5"})
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.Status(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: "", false: "https://172.29.0.5:30443"}[pending]; st.Endpoint != want {
			t.Errorf("restore pending %v: endpoint %q, want %q", pending, st.Endpoint, want)
		}
	}
}
