package local

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	return &Runtime{dir: t.TempDir(), bins: map[string]string{}, group: supervisor.NewGroup(log), log: log, running: map[string]controlplane.Spec{}, addons: map[string]map[string]*controlplane.Addon{}}
}

// TestDeleteRemovesEmptyNamespaceDir: a namespace's data directory goes with
// its last cluster and stays while another cluster of it remains.
func TestDeleteRemovesEmptyNamespaceDir(t *testing.T) {
	r := newTestRuntime(t)
	for _, key := range []string{"team/a", "team/b"} {
		if err := os.MkdirAll(filepath.Join(r.DataDir(key), "etcd"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := r.Delete(ctx, "team/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.DataDir("team/a")); !os.IsNotExist(err) {
		t.Errorf("data of team/a left: %v", err)
	}
	if _, err := os.Stat(r.DataDir("team/b")); err != nil {
		t.Fatalf("data of team/b removed with team/a: %v", err)
	}
	if err := r.Delete(ctx, "team/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "team")); !os.IsNotExist(err) {
		t.Errorf("empty namespace directory left after its last cluster: %v", err)
	}
	if _, err := os.Stat(r.dir); err != nil {
		t.Errorf("the runtime's own directory went too: %v", err)
	}
	// Idempotent.
	if err := r.Delete(ctx, "team/b"); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestEnsureRefusesSpecWithoutEncryptionConfig(t *testing.T) {
	r := newTestRuntime(t)
	_, err := r.Ensure(context.Background(), controlplane.Spec{Key: "default/demo", PKI: pki.Bundle{}})
	if err == nil || !strings.Contains(err.Error(), encryption.ConfigFile) {
		t.Fatalf("Ensure without an encryption configuration = %v, want an error naming %s", err, encryption.ConfigFile)
	}
	if _, err := os.Stat(r.DataDir("default/demo")); !os.IsNotExist(err) {
		t.Error("the refused Ensure wrote files")
	}
}

// TestArgsSecrets: Secrets are encrypted at rest and etcd's peer port takes
// only TLS with the peer certificate.
func TestArgsSecrets(t *testing.T) {
	l := newLayout("/data/default/demo")
	s := controlplane.Spec{Key: "default/demo", Ports: controlplane.Ports{APIServer: 1, EtcdClient: 2, EtcdPeer: 3}, ServiceCIDR: "10.96.0.0/12"}
	api := apiServerArgs(l, s)
	if !slices.Contains(api, "--encryption-provider-config="+l.PKI(encryption.ConfigFile)) {
		t.Errorf("kube-apiserver args lack the encryption configuration: %v", api)
	}
	etcd := etcdArgs(l, s)
	for _, want := range []string{
		"--listen-peer-urls=https://127.0.0.1:3",
		"--initial-advertise-peer-urls=https://127.0.0.1:3",
		"--peer-client-cert-auth=true",
		"--peer-cert-file=" + l.PKI(pki.EtcdPeerCertFile),
		"--peer-key-file=" + l.PKI(pki.EtcdPeerKeyFile),
		"--peer-trusted-ca-file=" + l.PKI(pki.EtcdCACertFile),
		"--peer-cert-allowed-cn=" + pki.EtcdPeerCommonName,
	} {
		if !slices.Contains(etcd, want) {
			t.Errorf("etcd args lack %s: %v", want, etcd)
		}
	}
	for _, a := range etcd {
		if strings.Contains(a, "http://") {
			t.Errorf("etcd listens in clear text: %s", a)
		}
	}
}
