package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
)

func TestStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := Store{Client: fake.NewClientset()}
	if revs, err := st.List(ctx, ""); err != nil || len(revs) != 0 {
		t.Fatalf("empty cluster: %v %v", revs, err)
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "shop"}, "data": map[string]any{"k": "v"}}}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	r := Revision{Release: "shop", Number: 1, Status: StatusPending, Digest: "sha256:ab", Source: "app/", Kind: SourceManifests, Objects: 1, Applied: at}
	if err := st.Create(ctx, r, []*unstructured.Unstructured{cm}); err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, r, nil); err == nil || !strings.Contains(err.Error(), "another deploy of release shop is running") {
		t.Fatalf("second create of revision 1: %v", err)
	}
	if err := st.SetStatus(ctx, "shop", 1, StatusFailed, "Deployment shop/web: no room"); err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, Revision{Release: "other", Number: 1, Status: StatusDeployed, Applied: at}, nil); err != nil {
		t.Fatal(err)
	}
	revs, err := st.List(ctx, "shop")
	if err != nil || len(revs) != 1 {
		t.Fatalf("revisions of shop: %v %v", revs, err)
	}
	want := r
	want.Status, want.Message = StatusFailed, "Deployment shop/web: no room"
	if revs[0] != want {
		t.Fatalf("revision read back\n got %+v\nwant %+v", revs[0], want)
	}
	if all, err := st.List(ctx, ""); err != nil || len(all) != 2 {
		t.Fatalf("all revisions: %v %v", all, err)
	}
	objs, err := st.Objects(ctx, "shop", 1)
	if err != nil || len(objs) != 1 || objs[0].GetName() != "a" || objs[0].Object["data"].(map[string]any)["k"] != "v" {
		t.Fatalf("objects read back: %v %v", objs, err)
	}
	if err := st.Delete(ctx, "shop", 1); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "shop", 1); err != nil {
		t.Fatalf("deleting a missing revision: %v", err)
	}
	if revs, err := st.List(ctx, "shop"); err != nil || len(revs) != 0 {
		t.Fatalf("after delete: %v %v", revs, err)
	}
}
