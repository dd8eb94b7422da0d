package deploy

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// DiscoveryLag bounds how long a mapping of a kind whose CRD is
// established waits for the API server's discovery to serve the kind.
var DiscoveryLag = 15 * time.Second

// crdGVR is where CustomResourceDefinitions are read.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdMapper is the RESTMapper of a Cluster. The API server marks a CRD
// Established before its discovery serves the new kind; an apply that
// maps the kind in between would fail with "no matches for kind". For the
// kinds of the CRDs an apply brings (expect), a mapping that finds no
// match while the CRD is Established re-reads discovery until the kind
// appears or DiscoveryLag passes. Every other no-match returns at once.
type crdMapper struct {
	meta.ResettableRESTMapper
	// established reports whether the CRD named so is Established.
	established func(ctx context.Context, crd string) bool
	interval    time.Duration

	mu   sync.Mutex
	crds map[schema.GroupKind]string // kind → name of its CRD in the source
}

// newCRDMapper wraps inner; established reads CRDs through dyn.
func newCRDMapper(inner meta.ResettableRESTMapper, dyn dynamic.Interface) *crdMapper {
	return &crdMapper{
		ResettableRESTMapper: inner,
		interval:             100 * time.Millisecond,
		established: func(ctx context.Context, name string) bool {
			crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			return err == nil && crdEstablished(crd)
		},
	}
}

// crdEstablished reports whether crd is Established, as kstatus reads a
// CRD's conditions (Current) (pure).
func crdEstablished(crd *unstructured.Unstructured) bool {
	st, err := status.Compute(crd)
	return err == nil && st.Status == status.CurrentStatus
}

// expect sets the kinds defined by the CRDs among objs (replacing the
// set of an earlier apply); expect(nil) clears it.
func (m *crdMapper) expect(objs []*unstructured.Unstructured) {
	crds := map[schema.GroupKind]string{}
	for _, o := range objs {
		if !object.IsCRD(o) {
			continue
		}
		if gk, ok := object.GetCRDGroupKind(o); ok {
			crds[gk] = o.GetName()
		}
	}
	m.mu.Lock()
	m.crds = crds
	m.mu.Unlock()
}

func (m *crdMapper) crdOf(gk schema.GroupKind) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.crds[gk]
	return name, ok
}

// RESTMapping maps as the wrapped mapper does, waiting out discovery's lag
// behind an Established CRD of the current apply (see crdMapper).
func (m *crdMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	mapping, err := m.ResettableRESTMapper.RESTMapping(gk, versions...)
	if !meta.IsNoMatchError(err) {
		return mapping, err
	}
	name, ok := m.crdOf(gk)
	if !ok {
		return mapping, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), DiscoveryLag)
	defer cancel()
	if !m.established(ctx, name) {
		return mapping, err // not applied yet: nothing to wait for
	}
	_ = wait.PollUntilContextCancel(ctx, m.interval, false, func(context.Context) (bool, error) {
		m.Reset()
		mapping, err = m.ResettableRESTMapper.RESTMapping(gk, versions...)
		return !meta.IsNoMatchError(err), nil
	})
	return mapping, err
}
