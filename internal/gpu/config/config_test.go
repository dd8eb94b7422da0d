package config

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Default()
	ok.NodeName = "n"
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"default", func(*Config) {}, ""},
		{"mock", func(c *Config) { c.Backend = "mock:dgxb200" }, ""},
		{"unknown mock", func(c *Config) { c.Backend = "mock:dgx1" }, "unknown mock"},
		{"unknown backend", func(c *Config) { c.Backend = "fake" }, "must be"},
		{"mig strategy", func(c *Config) { c.MIGStrategy = "all" }, "migStrategy"},
		{"policy", func(c *Config) { c.DevicePlugin.AllocationPolicy = "random" }, "allocationPolicy"},
		{"list strategy", func(c *Config) { c.DevicePlugin.DeviceListStrategy = "mounts" }, "deviceListStrategy"},
		{"no node name with labels", func(c *Config) { c.NodeName = "" }, "nodeName"},
		{"replicas", func(c *Config) {
			c.Sharing.TimeSlicing = &TimeSlicing{Resources: []ReplicatedResource{{Name: "nvidia.com/gpu", Replicas: 0}, {Name: "nvidia.com/gpu", Replicas: 2}}}
		}, "listed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestSharedResourceName(t *testing.T) {
	tests := []struct {
		r         ReplicatedResource
		byDefault bool
		want      string
	}{
		{ReplicatedResource{Name: "nvidia.com/gpu", Replicas: 4}, false, "nvidia.com/gpu"},
		{ReplicatedResource{Name: "nvidia.com/gpu", Replicas: 4}, true, "nvidia.com/gpu.shared"},
		{ReplicatedResource{Name: "nvidia.com/gpu", Replicas: 1}, true, "nvidia.com/gpu"},
		{ReplicatedResource{Name: "nvidia.com/gpu", Replicas: 4, Rename: "gpu-ts"}, true, "nvidia.com/gpu-ts"},
		{ReplicatedResource{Name: "nvidia.com/gpu", Replicas: 4, Rename: "example.com/gpu"}, false, "example.com/gpu"},
	}
	for _, tc := range tests {
		if got := SharedResourceName(tc.r, tc.byDefault); got != tc.want {
			t.Errorf("%+v byDefault=%v: %s, want %s", tc.r, tc.byDefault, got, tc.want)
		}
	}
}
