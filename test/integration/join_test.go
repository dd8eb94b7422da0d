package integration

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/test/testenv"
)

// testProxyCertificate: a registered node asks, with its own credential,
// for its kube-proxy's certificate as local nodes do; fke approves it,
// kube-controller-manager signs it for the lifetime asked, and it holds
// what kube-proxy needs and no more.
func testProxyCertificate(t *testing.T, adminCfg, nodeCfg *rest.Config, node string) {
	dir := t.TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: nodeCfg.Host, CertificateAuthorityData: adminCfg.CAData, TLSServerName: adminCfg.ServerName}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificateData: nodeCfg.CertData, ClientKeyData: nodeCfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "node"}
	kc.CurrentContext = "c"
	kubeletKC := filepath.Join(dir, "kubelet.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeletKC); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pc, err := bootstrap.StartProxyCertificate(t.Context(), node, kubeletKC, filepath.Join(dir, "pki"), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Wait(t.Context(), 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE kube-proxy certificate requested -> signed: %s", time.Since(start).Round(10*time.Millisecond))
	cert := pc.Current().Leaf
	if cert.Subject.CommonName != bootstrap.ProxyUser(node) || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != bootstrap.ProxyGroup {
		t.Errorf("kube-proxy certificate subject %s, want CN=%s, O=%s", cert.Subject, bootstrap.ProxyUser(node), bootstrap.ProxyGroup)
	}
	if life := time.Until(cert.NotAfter); life > time.Hour || life < 50*time.Minute {
		t.Errorf("kube-proxy certificate expires in %s, want the hour asked for", life)
	}
	proxyKC, err := bootstrap.ProxyCertKubeconfig(nodeCfg.Host, adminCfg.ServerName, adminCfg.CAData, filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	proxyCfg, err := clientcmd.RESTConfigFromKubeConfig(proxyKC)
	if err != nil {
		t.Fatal(err)
	}
	proxy := kubernetes.NewForConfigOrDie(proxyCfg)
	review, err := proxy.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || review.Status.UserInfo.Username != bootstrap.ProxyUser(node) {
		t.Fatalf("kube-proxy's kubeconfig authenticates as %+v, %v; want %s", review, err, bootstrap.ProxyUser(node))
	}
	// What kube-proxy lists and watches (system:node-proxier), and no more.
	if _, err := proxy.CoreV1().Services("").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("kube-proxy listing Services: %v", err)
	}
	if _, err := proxy.DiscoveryV1().EndpointSlices("").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("kube-proxy listing EndpointSlices: %v", err)
	}
	if _, err := proxy.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{}); err != nil {
		t.Errorf("kube-proxy reading its Node: %v", err)
	}
	if _, err := proxy.CoreV1().Secrets("kube-system").List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kube-proxy listing Secrets: %v, want Forbidden", err)
	}
	if _, err := proxy.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kube-proxy listing Pods: %v, want Forbidden", err)
	}
}

// testBootstrapFileTTL: `fke node bootstrap-file --ttl` hands out a token of
// its own that expires after the TTL, and the file holds no credential
// but that token.
func testBootstrapFileTTL(t *testing.T, e *testenv.Env, admin kubernetes.Interface, poolToken string) nodejoin.BootstrapFile {
	start := time.Now()
	data := e.MustRun("node", "bootstrap-file", "boot", "--pool", "cpu", "--ttl", "10m")
	t.Logf("FIGURE bootstrap-file with a new token: %s", time.Since(start).Round(10*time.Millisecond))
	bf, err := nodejoin.ParseBootstrapFile([]byte(data))
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if bf.Token == poolToken {
		t.Errorf("bootstrap-file --ttl 10m handed out the pool's token")
	}
	s, err := admin.CoreV1().Secrets("kube-system").Get(t.Context(), "bootstrap-token-"+bf.TokenID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(exp); left > 10*time.Minute || left < 9*time.Minute {
		t.Errorf("token %s expires in %s, want 10m", bf.TokenID(), left)
	}
	if bf.TokenExpires == nil || !bf.TokenExpires.Time.Equal(exp) {
		t.Errorf("the file says the token expires at %v, its Secret %s", bf.TokenExpires, exp)
	}
	if string(s.Data["auth-extra-groups"]) != bootstrap.PoolGroup("cpu") {
		t.Errorf("token groups %q, want pool cpu's", s.Data["auth-extra-groups"])
	}
	// No certificate in the file outlives the token but the cluster CA,
	// which is public; there is no private key at all.
	texts := fileTexts(data)
	for _, c := range fileCertificates(t, texts) {
		if !c.IsCA && c.NotAfter.After(exp) {
			t.Errorf("the bootstrap file holds a certificate of %s valid until %s, after its token expires (%s)", c.Subject, c.NotAfter, exp)
		}
	}
	for _, text := range texts {
		if strings.Contains(text, "PRIVATE KEY") {
			t.Errorf("the bootstrap file holds a private key:\n%s", data)
		}
	}
	for _, ttl := range []string{"0", "25h", "5m"} {
		if out := e.RunFail("node", "bootstrap-file", "boot", "--pool", "cpu", "--ttl", ttl); !strings.Contains(out, "a bootstrap file's token lives from 10m0s to 24h0m0s") {
			t.Errorf("bootstrap-file --ttl %s: %s", ttl, out)
		}
	}
	return bf
}

// fileTexts returns a bootstrap file's text and the text of each base64
// string in it (YAML's []byte).
func fileTexts(data string) []string {
	texts := []string{data}
	for _, m := range regexp.MustCompile(`[A-Za-z0-9+/=]{64,}`).FindAllString(data, -1) {
		if b, err := base64.StdEncoding.DecodeString(m); err == nil {
			texts = append(texts, string(b))
		}
	}
	return texts
}

// fileCertificates parses every PEM certificate in texts.
func fileCertificates(t *testing.T, texts []string) []*x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for _, text := range texts {
		rest := []byte(text)
		for {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("a %s block of the bootstrap file: %v", block.Type, err)
			}
			certs = append(certs, c)
		}
	}
	if len(certs) == 0 {
		t.Fatal("no certificate in the bootstrap file, not even the CA")
	}
	return certs
}

// testJoinFailsFast: `fke node join` with a file that cannot work exits
// non-zero within seconds and says why, before it touches the host.
func testJoinFailsFast(t *testing.T, e *testenv.Env, adminCfg *rest.Config, good nodejoin.BootstrapFile) {
	// The file's server is the bridge gateway local nodes reach; this test
	// has no bridge, so it joins at the API server's loopback address.
	good.Server = adminCfg.Host
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	past := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	otherCA := e.ManagementConfig().CAData
	for _, tc := range []struct {
		name   string
		mut    func(*nodejoin.BootstrapFile)
		flags  []string
		within time.Duration
		says   []string
	}{
		{"a wrong token", func(f *nodejoin.BootstrapFile) { f.Token = "wrongi.0123456789abcdef" }, nil, 10 * time.Second,
			[]string{"wrongi", adminCfg.Host, "401 Unauthorized", "fke node bootstrap-file"}},
		{"an expired token", func(f *nodejoin.BootstrapFile) { f.Token, f.TokenExpires = "expird.0123456789abcdef", nil }, nil, 10 * time.Second,
			[]string{"expird", "401 Unauthorized"}},
		{"a token the file says expired", func(f *nodejoin.BootstrapFile) { f.Token, f.TokenExpires = "expird.0123456789abcdef", &past }, nil, 10 * time.Second,
			[]string{"expird", "expired at " + past.UTC().Format(time.RFC3339)}},
		{"another cluster's CA", func(f *nodejoin.BootstrapFile) { f.CertificateAuthorityData = otherCA }, nil, 10 * time.Second,
			[]string{"API server not trusted", adminCfg.Host}},
		{"no API server", func(f *nodejoin.BootstrapFile) { f.Server = closed }, []string{"--api-timeout", "2s"}, 12 * time.Second,
			[]string{"no answer from the API server at " + closed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good
			tc.mut(&f)
			data, err := f.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "bootstrap.yaml")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			out, err := e.Run(append([]string{"node", "join", "--bootstrap", path, "--name", "never"}, tc.flags...)...)
			took := time.Since(start)
			t.Logf("FIGURE fke node join with %s fails after %s", tc.name, took.Round(10*time.Millisecond))
			if err == nil {
				t.Fatalf("fke node join succeeded:\n%s", out)
			}
			if took > tc.within {
				t.Errorf("fke node join failed after %s, want within %s", took, tc.within)
			}
			for _, s := range tc.says {
				if !strings.Contains(out, s) {
					t.Errorf("fke node join says %q, not %q", out, s)
				}
			}
		})
	}
}
