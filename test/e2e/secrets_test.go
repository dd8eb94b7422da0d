package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// TestSecretsEncryptedAtRest reads Secrets straight from etcd, as someone
// with a copy of etcd's data would: in the management etcd and in a tenant's
// etcd they are stored encrypted (k8s:enc:...) without their plain text, and
// still read back through the API after `fke down` and `fke up`. The keys
// are 0600 files outside etcd; etcd's peer port speaks only TLS and takes
// only the peer certificate.
func TestSecretsEncryptedAtRest(t *testing.T) {
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "vault", "--wait")
	const plain = "fke-canary-plaintext-4b1d"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "canary"},
		StringData: map[string]string{"password": plain},
	}
	tenant := e.Tenant("vault")
	if _, err := tenant.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mgmt := kubernetes.NewForConfigOrDie(e.ManagementConfig())
	if _, err := mgmt.CoreV1().Secrets("default").Create(ctx, secret.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, where := range []string{"vault", ""} {
		raw := rawEtcdValue(t, e, where, "/registry/secrets/default/canary")
		if !encryption.Encrypted(raw) || !strings.HasPrefix(string(raw), encryption.Prefix+"secretbox:v1:") {
			t.Errorf("etcd %q: Secret stored as %q..., want it to start with %ssecretbox:v1:", where, head(raw), encryption.Prefix)
		}
		if strings.Contains(string(raw), plain) {
			t.Errorf("etcd %q: the Secret's plain text is in etcd", where)
		}
	}
	// The tenant's PKI Secret (holding its encryption key) is encrypted too.
	if raw := rawEtcdValue(t, e, "", "/registry/secrets/default/vault-pki"); !encryption.Encrypted(raw) {
		t.Errorf("the tenant's PKI Secret is stored as %q... in the management etcd", head(raw))
	}

	for _, path := range []string{
		managementplane.Paths{Dir: e.DataDir}.EncryptionConfig(),
		filepath.Join(e.ClusterDir("vault"), "pki", encryption.ConfigFile),
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
		}
	}

	checkEtcdPeerPort(t, e, "vault", int(e.Cluster("vault").Status.Ports.EtcdPeer))
	checkEtcdPeerPort(t, e, "", e.ManagementPorts().EtcdPeer)

	// The keys survive a restart of everything.
	e.MustRun("down")
	e.MustRun("up", "--warm-pool=0")
	waitReady(t, e, "vault")
	testenv.Eventually(t, 60*time.Second, "Secrets readable after fke down and up", func() error {
		for _, cs := range []kubernetes.Interface{e.Tenant("vault"), kubernetes.NewForConfigOrDie(e.ManagementConfig())} {
			s, err := cs.CoreV1().Secrets("default").Get(ctx, "canary", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if string(s.Data["password"]) != plain {
				t.Fatalf("Secret read back as %q", s.Data["password"])
			}
		}
		return nil
	})

	// The namespace's data directory goes with its last cluster.
	e.MustRun("cluster", "delete", "vault", "--wait")
	assertGone(t, filepath.Dir(e.ClusterDir("vault")))
}

// rawEtcdValue reads key from the etcd of cluster name (management when empty).
func rawEtcdValue(t *testing.T, e *testenv.Env, name, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.Etcd(name).Get(ctx, key)
	if err != nil {
		t.Fatalf("etcd %q: get %s: %v", name, key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd %q: %s not found", name, key)
	}
	return resp.Kvs[0].Value
}

// checkEtcdPeerPort: plain HTTP and TLS with another certificate of the etcd
// CA are refused on the peer port; the peer certificate is accepted.
func checkEtcdPeerPort(t *testing.T, e *testenv.Env, name string, port int) {
	t.Helper()
	url := "127.0.0.1:" + strconv.Itoa(port) + "/version"
	get := func(scheme string, cfg *tls.Config) error {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := hc.Get(scheme + "://" + url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return &httpStatusError{resp.Status}
		}
		return nil
	}
	if err := get("http", nil); err == nil {
		t.Errorf("etcd %q: the peer port answers plain HTTP", name)
	}
	if err := get("https", e.EtcdTLS(name, pki.APIServerEtcdClient)); err == nil {
		t.Errorf("etcd %q: the peer port accepts the API server's etcd client certificate", name)
	}
	if err := get("https", e.EtcdTLS(name, pki.EtcdPeer)); err != nil {
		t.Errorf("etcd %q: the peer port refuses the peer certificate: %v", name, err)
	}
}

type httpStatusError struct{ status string }

func (e *httpStatusError) Error() string { return e.status }

// assertGone fails unless path does not exist.
func assertGone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(path)
		t.Errorf("%s still exists (%v, %d entries)", path, err, len(entries))
	}
}

func head(b []byte) string {
	if len(b) > 24 {
		b = b[:24]
	}
	return string(b)
}
