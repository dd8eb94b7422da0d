package managementplane

import (
	"os"
	"testing"
)

// A data directory from before the webhook keeps its recorded ports and
// gets a webhook port that none of them uses.
func TestLoadPortsAddsMissingOnly(t *testing.T) {
	p := Paths{Dir: t.TempDir()}
	if err := os.WriteFile(p.Ports(), []byte(`{"apiServer":41001,"etcdClient":41002,"etcdPeer":41003,"managerHealth":41004}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pt, err := loadPorts(p)
	if err != nil {
		t.Fatal(err)
	}
	if pt.APIServer != 41001 || pt.EtcdClient != 41002 || pt.EtcdPeer != 41003 || pt.Manager != 41004 {
		t.Fatalf("recorded ports changed: %+v", pt)
	}
	if pt.Webhook == 0 || pt.Webhook >= 41001 && pt.Webhook <= 41004 {
		t.Fatalf("webhook port %d", pt.Webhook)
	}
	again, err := loadPorts(p)
	if err != nil || again != pt {
		t.Fatalf("second load: %+v, %v; want %+v", again, err, pt)
	}

	fresh, err := loadPorts(Paths{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, port := range []int{fresh.APIServer, fresh.EtcdClient, fresh.EtcdPeer, fresh.Manager, fresh.Webhook} {
		if port == 0 || seen[port] {
			t.Fatalf("fresh ports not distinct: %+v", fresh)
		}
		seen[port] = true
	}
}
