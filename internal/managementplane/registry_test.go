package managementplane

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestRegistryConfigStaysOnLoopback(t *testing.T) {
	var cfg struct {
		HTTP    struct{ Addr string }
		Storage struct {
			Filesystem struct{ RootDirectory string }
		}
	}
	if err := yaml.Unmarshal(registryConfig("/data/registry", 5000), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != "127.0.0.1:5000" || cfg.Storage.Filesystem.RootDirectory != "/data/registry" {
		t.Fatalf("config = %+v", cfg)
	}
}

func TestLoadPortsAddsTheRegistryToOldDataDirs(t *testing.T) {
	p := Paths{Dir: t.TempDir()}
	old := `{"apiServer":1001,"etcdClient":1002,"etcdPeer":1003,"managerHealth":1004}`
	if err := os.WriteFile(p.Ports(), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	pt, err := loadPorts(p)
	if err != nil {
		t.Fatal(err)
	}
	if pt.APIServer != 1001 || pt.Manager != 1004 || pt.Registry == 0 {
		t.Fatalf("ports = %+v: old ones kept, a registry port added", pt)
	}
	data, _ := os.ReadFile(p.Ports())
	var saved ports
	if err := json.Unmarshal(data, &saved); err != nil || saved != pt {
		t.Fatalf("saved %s, want %+v", data, pt)
	}
	again, err := loadPorts(p)
	if err != nil || again != pt {
		t.Fatalf("second load = %+v, %v", again, err)
	}
	if !strings.Contains(string(registryConfig("/x", again.Registry)), "127.0.0.1:") {
		t.Fatal("registry not on loopback")
	}
}
