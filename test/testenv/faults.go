package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// ManagementPorts are the management plane's loopback ports (ports.json of
// the data directory).
type ManagementPorts struct {
	APIServer  int `json:"apiServer"`
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	Manager    int `json:"managerHealth"`
}

// ManagementPorts reads the management plane's ports.
func (e *Env) ManagementPorts() ManagementPorts {
	e.T.Helper()
	var p ManagementPorts
	data, err := os.ReadFile(managementplane.Paths{Dir: e.DataDir}.Ports())
	if err == nil {
		err = json.Unmarshal(data, &p)
	}
	if err != nil {
		e.T.Fatalf("management ports: %v", err)
	}
	return p
}

// ComponentPID returns the pid of a process the daemon supervises
// ("etcd", "kube-apiserver", "fke-manager"), or 0.
func (e *Env) ComponentPID(name string) int {
	e.T.Helper()
	for _, c := range e.State().Components {
		if c.Name == name {
			return c.PID
		}
	}
	return 0
}

// Cluster returns the Cluster default/name.
func (e *Env) Cluster(name string) *fkev1.Cluster {
	e.T.Helper()
	cl := &fkev1.Cluster{}
	if err := e.Client().Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
		e.T.Fatal(err)
	}
	return cl
}

// ClusterDir is the data directory of cluster default/name.
func (e *Env) ClusterDir(name string) string {
	return filepath.Join(e.DataDir, "clusters", "default", name)
}

// KillPID sends SIGKILL to pid and waits until it is gone; it returns the
// time of the kill.
func KillPID(t testing.TB, pid int) time.Time {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no process to kill (pid %d)", pid)
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing %d: %v", pid, err)
	}
	Eventually(t, 10*time.Second, fmt.Sprintf("process %d gone", pid), func() error {
		if Alive(pid) {
			return fmt.Errorf("still alive")
		}
		return nil
	})
	return at
}

// ManagerReadyz reports whether fke-manager answers /readyz.
func (e *Env) ManagerReadyz() error {
	return get(&http.Client{Timeout: 2 * time.Second}, "http://127.0.0.1:"+strconv.Itoa(e.ManagementPorts().Manager)+"/readyz")
}

// Readyz reports whether the API server of cfg answers /readyz with ok.
func Readyz(cfg *rest.Config) error {
	c := rest.CopyConfig(cfg)
	c.Timeout = 2 * time.Second
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return err
	}
	return get(hc, c.Host+"/readyz")
}

func get(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// Etcd returns a client of the etcd of cluster default/name, or of the
// management etcd when name is empty, authenticated as its API server. The
// client is closed when the test ends.
func (e *Env) Etcd(name string) *clientv3.Client {
	e.T.Helper()
	var pkiDir string
	var port int
	if name == "" {
		pkiDir, port = managementplane.Paths{Dir: e.DataDir}.PKI(), e.ManagementPorts().EtcdClient
	} else {
		pkiDir, port = filepath.Join(e.ClusterDir(name), "pki"), int(e.Cluster(name).Status.Ports.EtcdClient)
	}
	tlsCfg, err := e.etcdTLS(pkiDir, pki.APIServerEtcdClient)
	if err != nil {
		e.T.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"https://127.0.0.1:" + strconv.Itoa(port)},
		TLS:         tlsCfg,
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		e.T.Fatalf("etcd client: %v", err)
	}
	e.T.Cleanup(func() { c.Close() })
	return c
}

// EtcdTLS returns a TLS configuration trusting the etcd CA of pkiDir and
// presenting the pair base of it.
func (e *Env) etcdTLS(pkiDir, base string) (*tls.Config, error) {
	read := func(f string) []byte {
		data, err := os.ReadFile(filepath.Join(pkiDir, f))
		if err != nil {
			e.T.Fatal(err)
		}
		return data
	}
	return supervisor.ClientTLS(read(pki.EtcdCACertFile), read(pki.CertFile(base)), read(pki.KeyFile(base)))
}

// EtcdTLS returns a TLS configuration trusting the etcd CA of cluster
// default/name (the management plane when name is empty) and presenting its
// key pair base (for example pki.EtcdPeer).
func (e *Env) EtcdTLS(name, base string) *tls.Config {
	e.T.Helper()
	dir := managementplane.Paths{Dir: e.DataDir}.PKI()
	if name != "" {
		dir = filepath.Join(e.ClusterDir(name), "pki")
	}
	cfg, err := e.etcdTLS(dir, base)
	if err != nil {
		e.T.Fatal(err)
	}
	return cfg
}

// WaitAddon waits until addon of cluster default/name reports phase in
// status.addons.
func (e *Env) WaitAddon(name, addon string, phase fkev1.AddonPhase, timeout time.Duration) {
	e.T.Helper()
	Eventually(e.T, timeout, addon+" "+string(phase), func() error {
		cl := &fkev1.Cluster{}
		if err := e.Client().Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
			return err
		}
		for _, a := range cl.Status.Addons {
			if a.Name == addon {
				if a.Phase != phase {
					return fmt.Errorf("%s: %s", a.Phase, a.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("no status of %s in %+v", addon, cl.Status.Addons)
	})
}
