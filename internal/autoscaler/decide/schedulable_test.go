package decide

import "testing"

// TestSchedulable: a Ready node still carrying start-up taints is capacity
// for scale-up decisions but not for placing pods now.
func TestSchedulable(t *testing.T) {
	t.Parallel()
	s := Snapshot{Nodes: []NodeInfo{{Ready: true}, {Ready: true, Starting: true}, {Ready: false}}}
	got := s.Schedulable()
	want := []bool{true, false, false}
	for i, n := range got.Nodes {
		if n.Ready != want[i] {
			t.Errorf("node %d: Ready %v, want %v", i, n.Ready, want[i])
		}
	}
	if !s.Nodes[1].Ready {
		t.Error("Schedulable changed the snapshot it was given")
	}
}
