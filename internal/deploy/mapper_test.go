package deploy

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// lagMapper serves widgets only after `misses` reads and counts resets.
type lagMapper struct {
	meta.ResettableRESTMapper
	misses, reads, resets int
}

func (l *lagMapper) Reset() { l.resets++ }
func (l *lagMapper) RESTMapping(gk schema.GroupKind, _ ...string) (*meta.RESTMapping, error) {
	l.reads++
	if gk.Kind == "Widget" && l.reads > l.misses {
		return &meta.RESTMapping{Resource: schema.GroupVersionResource{Group: gk.Group, Version: "v1", Resource: "widgets"}}, nil
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk}
}

func widgetCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.fke.dev"},
		"spec":     map[string]any{"group": "example.fke.dev", "names": map[string]any{"kind": "Widget", "plural": "widgets"}},
	}}
}

func TestCRDMapperWaitsOutDiscoveryLag(t *testing.T) {
	widget := schema.GroupKind{Group: "example.fke.dev", Kind: "Widget"}
	gadget := schema.GroupKind{Group: "example.fke.dev", Kind: "Gadget"}
	cases := []struct {
		name        string
		kind        schema.GroupKind
		expected    bool // the apply brings the CRD
		established bool
		misses      int
		wantMatch   bool
		wantReads   int
	}{
		{"served at once", widget, true, true, 0, true, 1},
		{"established, discovery two reads behind", widget, true, true, 2, true, 3},
		{"CRD not in this apply: no wait", widget, false, true, 2, false, 1},
		{"CRD in the apply but not established yet: no wait", widget, true, false, 2, false, 1},
		{"a kind no CRD defines: no wait", gadget, true, true, 0, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inner := &lagMapper{misses: tc.misses}
			m := &crdMapper{ResettableRESTMapper: inner, interval: time.Millisecond,
				established: func(context.Context, string) bool { return tc.established }}
			if tc.expected {
				m.expect([]*unstructured.Unstructured{widgetCRD()})
			}
			mapping, err := m.RESTMapping(tc.kind, "v1")
			if tc.wantMatch != (err == nil) {
				t.Fatalf("RESTMapping(%s) = %v, %v; want match %v", tc.kind, mapping, err, tc.wantMatch)
			}
			if !tc.wantMatch && !meta.IsNoMatchError(err) {
				t.Fatalf("error %v is not a no-match", err)
			}
			if inner.reads != tc.wantReads {
				t.Fatalf("discovery read %d times, want %d", inner.reads, tc.wantReads)
			}
			if inner.resets != tc.wantReads-1 {
				t.Fatalf("reset %d times, want %d", inner.resets, tc.wantReads-1)
			}
		})
	}
}

func TestCRDMapperGivesUpAfterDiscoveryLag(t *testing.T) {
	defer func(d time.Duration) { DiscoveryLag = d }(DiscoveryLag)
	DiscoveryLag = 50 * time.Millisecond
	inner := &lagMapper{misses: 1 << 30}
	m := &crdMapper{ResettableRESTMapper: inner, interval: 5 * time.Millisecond,
		established: func(context.Context, string) bool { return true }}
	m.expect([]*unstructured.Unstructured{widgetCRD()})
	start := time.Now()
	_, err := m.RESTMapping(schema.GroupKind{Group: "example.fke.dev", Kind: "Widget"})
	if !meta.IsNoMatchError(err) {
		t.Fatalf("err = %v, want no-match once discovery never serves the kind", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("gave up after %s, want about %s", took, DiscoveryLag)
	}
	m.expect(nil)
	inner.reads = 0
	if _, err := m.RESTMapping(schema.GroupKind{Group: "example.fke.dev", Kind: "Widget"}); !meta.IsNoMatchError(err) || inner.reads != 1 {
		t.Fatalf("after expect(nil): err %v after %d reads, want one read", err, inner.reads)
	}
}

func TestCRDEstablished(t *testing.T) {
	for _, tc := range []struct {
		conds []any
		want  bool
	}{
		{nil, false},
		{[]any{map[string]any{"type": "NamesAccepted", "status": "True"}}, false},
		{[]any{map[string]any{"type": "Established", "status": "False"}}, false},
		{[]any{map[string]any{"type": "NamesAccepted", "status": "True"}, map[string]any{"type": "Established", "status": "True"}}, true},
	} {
		crd := widgetCRD()
		if tc.conds != nil {
			crd.Object["status"] = map[string]any{"conditions": tc.conds}
		}
		if got := crdEstablished(crd); got != tc.want {
			t.Errorf("crdEstablished(%v) = %v, want %v", tc.conds, got, tc.want)
		}
	}
}
