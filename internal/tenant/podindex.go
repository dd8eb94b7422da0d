package tenant

import (
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

// PodIndex keeps a tenant's cached pods grouped by node, up to date with
// the pod informer, so that a decision pass over tens of thousands of pods
// does not regroup them every time: only the nodes whose pods changed are
// regrouped, when asked for.
//
// The pods are the cache's own objects and must not be modified. A slice
// returned by Grouped or OnNode is never changed afterwards (a change makes
// a new one), so callers may keep it. Safe for concurrent use.
type PodIndex struct {
	mu    sync.Mutex
	nodes map[string]*podSet // by spec.nodeName; "" holds the pods not bound
	where map[types.UID]string
	// changes counts changes; a set's version is the count at its last one.
	changes uint64
}

type podSet struct {
	version uint64
	pods    map[types.UID]*corev1.Pod
	// list is pods sorted by namespace and name; nil when it must be rebuilt.
	list []*corev1.Pod
}

// NewPodIndex returns an empty index; Handler keeps it up to date.
func NewPodIndex() *PodIndex {
	return &PodIndex{nodes: map[string]*podSet{}, where: map[types.UID]string{}}
}

// Handler returns the informer event handler that feeds the index.
func (x *PodIndex) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { x.set(o) },
		UpdateFunc: func(_, o any) { x.set(o) },
		DeleteFunc: func(o any) {
			if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				x.Delete(p)
			}
		},
	}
}

func (x *PodIndex) set(o any) {
	if p, ok := o.(*corev1.Pod); ok {
		x.Set(p)
	}
}

// Set adds or replaces p.
func (x *PodIndex) Set(p *corev1.Pod) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.where[p.UID]; ok && old != p.Spec.NodeName {
		x.drop(old, p.UID)
	}
	s := x.nodes[p.Spec.NodeName]
	if s == nil {
		s = &podSet{pods: map[types.UID]*corev1.Pod{}}
		x.nodes[p.Spec.NodeName] = s
	}
	s.pods[p.UID] = p
	x.changed(s)
	x.where[p.UID] = p.Spec.NodeName
}

// Delete removes p.
func (x *PodIndex) Delete(p *corev1.Pod) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if node, ok := x.where[p.UID]; ok {
		x.drop(node, p.UID)
		delete(x.where, p.UID)
	}
}

func (x *PodIndex) drop(node string, uid types.UID) {
	s := x.nodes[node]
	if s == nil {
		return
	}
	delete(s.pods, uid)
	x.changed(s)
	if len(s.pods) == 0 {
		delete(x.nodes, node)
	}
}

func (x *PodIndex) changed(s *podSet) {
	x.changes++
	s.version = x.changes
	s.list = nil
}

// Grouped returns the bound pods by node name, and the pods not bound to
// any node.
func (x *PodIndex) Grouped() (byNode map[string][]*corev1.Pod, unbound []*corev1.Pod) {
	x.mu.Lock()
	defer x.mu.Unlock()
	byNode = make(map[string][]*corev1.Pod, len(x.nodes))
	for name, s := range x.nodes {
		if name == "" {
			unbound = s.sorted()
			continue
		}
		byNode[name] = s.sorted()
	}
	return byNode, unbound
}

// OnNode returns the pods bound to node, and a version that changes
// whenever they do (0 for a node without pods).
func (x *PodIndex) OnNode(node string) ([]*corev1.Pod, uint64) {
	if node == "" {
		return nil, 0
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.nodes[node]; s != nil {
		return s.sorted(), s.version
	}
	return nil, 0
}

// Len returns the number of pods.
func (x *PodIndex) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.where)
}

// Has reports whether the pod with uid exists.
func (x *PodIndex) Has(uid types.UID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.where[uid]
	return ok
}

func (s *podSet) sorted() []*corev1.Pod {
	if s.list != nil {
		return s.list
	}
	list := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Namespace != list[j].Namespace {
			return list[i].Namespace < list[j].Namespace
		}
		return list[i].Name < list[j].Name
	})
	s.list = list
	return list
}
