package hosted

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestAppliedSetNeeds(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	k := appliedKey{"Deployment", "fke-team-a", "kube-apiserver"}
	tests := []struct {
		name    string
		applied bool // k was applied with hash "h1" at t0
		hash    string
		at      time.Time
		want    bool
	}{
		{"never applied", false, "h1", t0, true},
		{"unchanged, just applied", true, "h1", t0.Add(time.Second), false},
		{"unchanged, within reapplyAfter", true, "h1", t0.Add(reapplyAfter - time.Millisecond), false},
		{"unchanged, reapplyAfter passed", true, "h1", t0.Add(reapplyAfter), true},
		{"changed", true, "h2", t0.Add(time.Second), true},
		{"the clock went back", true, "h1", t0.Add(-time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s appliedSet
			if tt.applied {
				s.done(k, "h1", t0)
			}
			if got := s.needs(k, tt.hash, tt.at); got != tt.want {
				t.Errorf("needs = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAppliedSetForget(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	mine := []appliedKey{{"Namespace", "", "fke-team-a"}, {"Secret", "fke-team-a", "control-plane"}, {"Deployment", "fke-team-a", "kube-apiserver"}}
	others := []appliedKey{{"Namespace", "", "fke-team-b"}, {"Secret", "fke-team-b", "control-plane"}, {"StatefulSet", "fke-system", "etcd"}}
	var s appliedSet
	for _, k := range append(append([]appliedKey{}, mine...), others...) {
		s.done(k, "h", t0)
	}
	s.forgetNamespace("fke-team-a")
	for _, k := range mine {
		if !s.needs(k, "h", t0) {
			t.Errorf("%v still known after its namespace was forgotten", k)
		}
	}
	for _, k := range others {
		if s.needs(k, "h", t0) {
			t.Errorf("%v forgotten with another namespace", k)
		}
	}
	s.forget(others[1])
	if !s.needs(others[1], "h", t0) {
		t.Errorf("%v still known after forget", others[1])
	}
}

// TestApplySendsOnlyChanges: Ensure's applies reach the API server for an
// object the runtime has not applied as it is now; after a failed apply,
// Stop or Delete, everything is applied again.
func TestApplySendsOnlyChanges(t *testing.T) {
	var sent []string
	fail := false
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if patch.Type() == client.Apply.Type() {
				if fail {
					return errors.New("injected")
				}
				sent = append(sent, obj.GetName())
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	r, err := New(Options{Client: c, Registry: "registry.test/fke"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	objs := func(value string) []client.Object {
		cm := func(name, v string) client.Object {
			return &corev1.ConfigMap{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "fke-team-a", Name: name},
				Data:       map[string]string{"k": v},
			}
		}
		return []client.Object{cm("a", "1"), cm("b", value)}
	}
	step := func(name string, value string, want ...string) {
		t.Helper()
		sent = nil
		if err := r.apply(ctx, objs(value)...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(sent, want) {
			t.Errorf("%s: applied %v, want %v", name, sent, want)
		}
	}
	step("first", "1", "a", "b")
	step("unchanged", "1")
	step("one changed", "2", "b")

	fail = true
	if err := r.apply(ctx, objs("3")...); err == nil {
		t.Fatal("an injected failure did not fail apply")
	}
	fail = false
	// What failed may have reached the server or not: b is sent again,
	// even as it was before.
	step("after a failure", "2", "b")

	r.applied.forgetNamespace("fke-team-a") // as Stop and Delete do
	step("after the namespace is forgotten", "3", "a", "b")

	var got corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: "fke-team-a", Name: "b"}, &got); err != nil || got.Data["k"] != "3" {
		t.Errorf("ConfigMap b: %v %v, want k=3", got.Data, err)
	}
}
