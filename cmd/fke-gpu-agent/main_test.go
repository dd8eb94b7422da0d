package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	gpuconfig "fke.dev/fke/internal/gpu/config"
)

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestInfoJSON(t *testing.T) {
	out, err := execute(t, "info", "--backend", "mock:dgxb200", "--node-api=false", "--node-name", "n", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc infoDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(doc.Devices) != 8 || doc.Devices[0].Family != "blackwell" || doc.System.DriverVersion == "" {
		t.Fatalf("doc %+v", doc)
	}
}

// TestAllocate: what a container given 2 simulated GPUs gets: their UUIDs,
// and no devices (there are none to give).
func TestAllocate(t *testing.T) {
	out, err := execute(t, "allocate", "--backend", "mock:dgxh100", "--node-api=false", "--node-name", "n", "--count", "2")
	if err != nil {
		t.Fatal(err)
	}
	var a allocation
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if a.Resource != "nvidia.com/gpu" || len(a.Devices) != 2 || a.Response == nil ||
		a.Response.Envs["NVIDIA_VISIBLE_DEVICES"] != a.Devices[0]+","+a.Devices[1] || len(a.Response.Devices) != 0 {
		t.Fatalf("allocation %s", out)
	}
}

func TestInfoTableWithConfigFile(t *testing.T) {
	out, err := execute(t, "info", "--config", "testdata/config.yaml", "--node-api=false")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "NVIDIA H100 80GB HBM3") || !strings.Contains(out, "MIG 3g.40gb") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"info", "--backend", "mock:nope", "--node-api=false"},
		{"info", "--backend", "mock:dgxh100", "--node-api=false", "-o", "yaml"},
		{"info", "--config", "testdata/missing.yaml"},
		{"info", "--backend", "mock:dgxh100", "--mig-strategy", "half", "--node-api=false"},
		{"allocate", "--backend", "mock:dgxh100", "--node-api=false", "--count", "0"},
		{"allocate", "--backend", "mock:dgxh100", "--node-api=false", "--count", "9"},
	} {
		if _, err := execute(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestFlagsOverrideConfigFile(t *testing.T) {
	root := newRootCommand()
	cmd, _, err := root.Find([]string{"info"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags([]string{"--config", "testdata/config.yaml", "--allocation-policy", "packed", "--node-api=false"}); err != nil {
		t.Fatal(err)
	}
	o := &options{configFile: "testdata/config.yaml", nodeAPI: false}
	flagged := gpuconfig.Default()
	flagged.DevicePlugin.AllocationPolicy = gpuconfig.AllocationPacked
	cfg, err := resolveConfig(cmd, o, flagged)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DevicePlugin.AllocationPolicy != gpuconfig.AllocationPacked {
		t.Errorf("flag not applied: %s", cfg.DevicePlugin.AllocationPolicy)
	}
	if cfg.DevicePlugin.DeviceListStrategy != gpuconfig.DeviceListCDI || cfg.MIGStrategy != gpuconfig.MIGStrategyMixed || cfg.Sharing.TimeSlicing.Resources[0].Replicas != 4 {
		t.Errorf("file values lost: %+v", cfg)
	}
	if cfg.Labels.Enabled {
		t.Error("labels enabled with --node-api=false")
	}
}
