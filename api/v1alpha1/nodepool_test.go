package v1alpha1

import "testing"

func TestGPUReplicas(t *testing.T) {
	for _, tc := range []struct {
		gpu  *NodePoolGPU
		want int64
	}{
		{nil, 1},
		{&NodePoolGPU{}, 1},
		{&NodePoolGPU{TimeSlicingReplicas: 1}, 1},
		{&NodePoolGPU{TimeSlicingReplicas: 4}, 4},
		{&NodePoolGPU{TimeSlicingReplicas: 4, MIGStrategy: "none"}, 4},
		{&NodePoolGPU{TimeSlicingReplicas: 4, MIGStrategy: "mixed"}, 1},
	} {
		np := &NodePool{Spec: NodePoolSpec{GPU: tc.gpu}}
		if got := np.GPUReplicas(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.gpu, got, tc.want)
		}
	}
}
