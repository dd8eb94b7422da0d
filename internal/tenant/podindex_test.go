package tenant

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

func indexPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

func names(pods []*corev1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func grouped(x *PodIndex) map[string][]string {
	byNode, unbound := x.Grouped()
	out := map[string][]string{}
	for n, pods := range byNode {
		out[n] = names(pods)
	}
	if len(unbound) > 0 {
		out[""] = names(unbound)
	}
	return out
}

func TestPodIndex(t *testing.T) {
	type step struct {
		set, del *corev1.Pod
		tomb     bool // delete through a tombstone
	}
	tests := []struct {
		name  string
		steps []step
		want  map[string][]string
		len   int
	}{
		{
			name:  "grouped by node, sorted by namespace and name",
			steps: []step{{set: indexPod("b", "x", "n1")}, {set: indexPod("a", "z", "n1")}, {set: indexPod("a", "y", "n1")}, {set: indexPod("a", "p", "n2")}},
			want:  map[string][]string{"n1": {"a/y", "a/z", "b/x"}, "n2": {"a/p"}},
			len:   4,
		},
		{
			name:  "pending pods are unbound",
			steps: []step{{set: indexPod("a", "p", "")}, {set: indexPod("a", "q", "n1")}},
			want:  map[string][]string{"": {"a/p"}, "n1": {"a/q"}},
			len:   2,
		},
		{
			name:  "binding moves a pod from unbound to its node",
			steps: []step{{set: indexPod("a", "p", "")}, {set: indexPod("a", "p", "n1")}},
			want:  map[string][]string{"n1": {"a/p"}},
			len:   1,
		},
		{
			name:  "delete, and a node without pods is gone",
			steps: []step{{set: indexPod("a", "p", "n1")}, {set: indexPod("a", "q", "n2")}, {del: indexPod("a", "p", "n1")}},
			want:  map[string][]string{"n2": {"a/q"}},
			len:   1,
		},
		{
			name:  "delete through a tombstone",
			steps: []step{{set: indexPod("a", "p", "n1")}, {del: indexPod("a", "p", "n1"), tomb: true}},
			want:  map[string][]string{},
			len:   0,
		},
		{
			name:  "deleting an unknown pod changes nothing",
			steps: []step{{set: indexPod("a", "p", "n1")}, {del: indexPod("a", "q", "n1")}},
			want:  map[string][]string{"n1": {"a/p"}},
			len:   1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewPodIndex()
			h := x.Handler()
			for _, s := range tt.steps {
				switch {
				case s.set != nil:
					h.OnAdd(s.set, false)
				case s.tomb:
					h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: s.del.Namespace + "/" + s.del.Name, Obj: s.del})
				default:
					h.OnDelete(s.del)
				}
			}
			if got := grouped(x); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("grouped = %v, want %v", got, tt.want)
			}
			if x.Len() != tt.len {
				t.Errorf("Len = %d, want %d", x.Len(), tt.len)
			}
		})
	}
}

func TestPodIndexSlicesAreNotChangedLater(t *testing.T) {
	x := NewPodIndex()
	x.Set(indexPod("a", "p", "n1"))
	before, v1 := x.OnNode("n1")
	again, v2 := x.OnNode("n1")
	if &before[0] != &again[0] || v1 != v2 {
		t.Error("an unchanged node's pods were regrouped")
	}
	x.Set(indexPod("a", "q", "n1"))
	x.Delete(indexPod("a", "p", "n1"))
	after, v3 := x.OnNode("n1")
	if v3 == v1 {
		t.Error("the version did not change with the pods")
	}
	if got := names(before); !reflect.DeepEqual(got, []string{"a/p"}) {
		t.Errorf("slice handed out earlier changed to %v", got)
	}
	if got := names(after); !reflect.DeepEqual(got, []string{"a/q"}) {
		t.Errorf("OnNode = %v, want [a/q]", got)
	}
	if !x.Has("a/q") || x.Has("a/p") {
		t.Error("Has does not follow set and delete")
	}
}

// TestIndexThenNotify: a pod handler is told of a change only once the
// index holds it, so a pass it wakes reads what woke it.
func TestIndexThenNotify(t *testing.T) {
	x := NewPodIndex()
	var seen []string
	h := indexThenNotify(x.Handler(), "default/demo", []PodHandler{func(key string, p *corev1.Pod) {
		if key != "default/demo" {
			t.Errorf("key %q", key)
		}
		byNode, unbound := x.Grouped()
		pods := byNode[p.Spec.NodeName]
		if p.Spec.NodeName == "" {
			pods = unbound
		}
		in := false
		for _, q := range pods {
			in = in || q == p
		}
		seen = append(seen, p.Name+"@"+p.Spec.NodeName+":"+map[bool]string{true: "indexed", false: "absent"}[in])
	}})
	pending := indexPod("default", "p", "")
	bound := indexPod("default", "p", "node-1")
	h.OnAdd(pending, false)
	h.OnUpdate(pending, bound)
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "default/p", Obj: bound})
	want := []string{"p@:indexed", "p@node-1:indexed", "p@node-1:absent"}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("handler saw %v, want %v", seen, want)
	}
}
