package nodepool

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestDecide(t *testing.T) {
	one := intstr.FromInt32(1)
	zero := intstr.FromInt32(0)
	half := intstr.FromString("50%")
	ready := func(name string, pods int, util float64) Member {
		return Member{Name: name, Ready: true, Pods: pods, Utilization: util}
	}
	old := func(name string, isReady bool) Member {
		return Member{Name: name, Ready: isReady, Outdated: true, Pods: 1}
	}

	tests := []struct {
		name       string
		desired    int
		members    []Member
		surge, una *intstr.IntOrString
		want       Plan
	}{
		{name: "scale from zero", desired: 2, want: Plan{Create: 2}},
		{name: "steady", desired: 2, members: []Member{ready("a", 1, .5), ready("b", 1, .5)}, want: Plan{}},
		{name: "scale up", desired: 3, members: []Member{ready("a", 1, .5), ready("b", 1, .5)}, want: Plan{Create: 1}},
		{name: "scale down removes empty nodes first", desired: 1,
			members: []Member{ready("busy", 3, .9), ready("empty", 0, 0), ready("light", 1, .1)},
			want:    Plan{Delete: []string{"empty", "light"}}},
		{name: "scale down removes least utilized", desired: 2,
			members: []Member{ready("a", 2, .8), ready("b", 2, .2), ready("c", 2, .5)},
			want:    Plan{Delete: []string{"b"}}},
		{name: "scale down removes unready first", desired: 1,
			members: []Member{ready("a", 0, 0), {Name: "booting"}},
			want:    Plan{Delete: []string{"booting"}}},
		{name: "scale down removes the autoscaler's choice first", desired: 1,
			members: []Member{ready("empty", 0, 0), {Name: "chosen", Ready: true, Pods: 2, Utilization: .9, Marked: true}},
			want:    Plan{Delete: []string{"chosen"}}},
		{name: "scale to zero", desired: 0, members: []Member{ready("a", 1, .5), ready("b", 0, 0)},
			want: Plan{Delete: []string{"b", "a"}}},
		{name: "rolling: surge one, keep old until new ready", desired: 2, surge: &one, una: &zero,
			members: []Member{old("o1", true), old("o2", true)},
			want:    Plan{Create: 1, Rolling: true}},
		{name: "rolling: new ready, remove one old", desired: 2, surge: &one, una: &zero,
			members: []Member{old("o1", true), old("o2", true), ready("n1", 0, 0)},
			want:    Plan{Rolling: true, Delete: []string{"o1"}}},
		{name: "rolling: new not ready yet, wait", desired: 2, surge: &one, una: &zero,
			members: []Member{old("o1", true), old("o2", true), {Name: "n1"}},
			want:    Plan{Rolling: true}},
		{name: "rolling: unavailable budget lets old go first", desired: 2, surge: &zero, una: &one,
			members: []Member{old("o1", true), old("o2", true)},
			want:    Plan{Rolling: true, Delete: []string{"o1"}}},
		{name: "rolling: both zero still progresses by surging one", desired: 1, surge: &zero, una: &zero,
			members: []Member{old("o1", true)},
			want:    Plan{Create: 1, Rolling: true}},
		{name: "rolling: unready old removed freely", desired: 2, surge: &one, una: &zero,
			members: []Member{old("o1", false), ready("n1", 0, 0), ready("n2", 0, 0)},
			want:    Plan{Rolling: true, Delete: []string{"o1"}}},
		{name: "rolling: percent surge", desired: 4, surge: &half, una: &zero,
			members: []Member{old("o1", true), old("o2", true), old("o3", true), old("o4", true)},
			want:    Plan{Create: 2, Rolling: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.desired, tt.members, tt.surge, tt.una)
			if got.Create != tt.want.Create || got.Rolling != tt.want.Rolling || !reflect.DeepEqual(nilIfEmpty(got.Delete), nilIfEmpty(tt.want.Delete)) {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
