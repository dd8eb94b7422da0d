package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func mustCA(t *testing.T, cn string) *KeyPair {
	t.Helper()
	ca, err := NewCA(cn, 0)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func verify(cert, ca *x509.Certificate, usage x509.ExtKeyUsage) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func TestNewCA(t *testing.T) {
	ca := mustCA(t, "test-ca")
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA=%v BasicConstraintsValid=%v MaxPathLen=%d", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 || c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		t.Errorf("CA key usage = %v", c.KeyUsage)
	}
	if len(c.SubjectKeyId) == 0 {
		t.Error("CA has no SubjectKeyId")
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	if _, ok := ca.Key.(*ecdsa.PrivateKey); !ok {
		t.Errorf("CA key is %T, want *ecdsa.PrivateKey", ca.Key)
	}
	if got := time.Until(c.NotAfter); got < DefaultCAValidity-time.Hour {
		t.Errorf("CA valid for %v, want about %v", got, DefaultCAValidity)
	}
	if skew := time.Since(c.NotBefore); skew < 59*time.Minute || skew > 61*time.Minute {
		t.Errorf("NotBefore is %v ago, want 1h", skew)
	}
	if _, err := NewCA("", 0); err == nil {
		t.Error("NewCA with empty name succeeded")
	}
}

func TestIssue(t *testing.T) {
	ca := mustCA(t, "test-ca")
	tests := []struct {
		name   string
		usages Usage
		ok     []x509.ExtKeyUsage
		notOK  []x509.ExtKeyUsage
	}{
		{"server", UsageServer, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{"client", UsageClient, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"both", UsageBoth, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := ca.Issue(CertSpec{
				CommonName:   "leaf-" + tt.name,
				Organization: []string{"org"},
				DNSNames:     []string{"example.test"},
				IPs:          []net.IP{net.ParseIP("10.0.0.1")},
				Usages:       tt.usages,
				Validity:     48 * time.Hour,
			})
			if err != nil {
				t.Fatalf("Issue: %v", err)
			}
			c := kp.Cert
			for _, u := range tt.ok {
				if err := verify(c, ca.Cert, u); err != nil {
					t.Errorf("verify usage %v: %v", u, err)
				}
			}
			for _, u := range tt.notOK {
				if err := verify(c, ca.Cert, u); err == nil {
					t.Errorf("verify usage %v succeeded, want failure", u)
				}
			}
			if c.IsCA {
				t.Error("leaf is a CA")
			}
			if c.Subject.CommonName != "leaf-"+tt.name || !slices.Equal(c.Subject.Organization, []string{"org"}) {
				t.Errorf("subject = %v", c.Subject)
			}
			if !slices.Equal(c.DNSNames, []string{"example.test"}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")) {
				t.Errorf("SANs = %v %v", c.DNSNames, c.IPAddresses)
			}
			if len(c.SubjectKeyId) == 0 || !bytes.Equal(c.AuthorityKeyId, ca.Cert.SubjectKeyId) {
				t.Errorf("SKI=%x AKI=%x, CA SKI=%x", c.SubjectKeyId, c.AuthorityKeyId, ca.Cert.SubjectKeyId)
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %v", c.SerialNumber)
			}
			if got := c.NotAfter.Sub(c.NotBefore); got != 49*time.Hour {
				t.Errorf("validity window %v, want 49h (48h + 1h skew)", got)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		leaf, err := ca.Issue(CertSpec{CommonName: "x", Usages: UsageClient})
		if err != nil {
			t.Fatal(err)
		}
		for name, tc := range map[string]struct {
			ca   *KeyPair
			spec CertSpec
		}{
			"no common name": {ca, CertSpec{Usages: UsageClient}},
			"no usage":       {ca, CertSpec{CommonName: "x"}},
			"issuer not CA":  {leaf, CertSpec{CommonName: "y", Usages: UsageClient}},
		} {
			if _, err := tc.ca.Issue(tc.spec); err == nil {
				t.Errorf("%s: Issue succeeded", name)
			}
		}
	})

	t.Run("never outlives CA", func(t *testing.T) {
		short, err := NewCA("short", 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := short.Issue(CertSpec{CommonName: "x", Usages: UsageClient})
		if err != nil {
			t.Fatal(err)
		}
		if kp.Cert.NotAfter.After(short.Cert.NotAfter) {
			t.Errorf("leaf NotAfter %v after CA NotAfter %v", kp.Cert.NotAfter, short.Cert.NotAfter)
		}
	})
}

func TestParseKeyPair(t *testing.T) {
	ca := mustCA(t, "test-ca")
	other := mustCA(t, "other-ca")
	ecDER, err := x509.MarshalECPrivateKey(ca.Key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})
	tests := []struct {
		name    string
		cert    []byte
		key     []byte
		wantErr string
	}{
		{"pkcs8", ca.CertPEM(), ca.KeyPEM(), ""},
		{"sec1", ca.CertPEM(), ecPEM, ""},
		{"mismatched key", ca.CertPEM(), other.KeyPEM(), "does not match"},
		{"no cert", nil, ca.KeyPEM(), "no CERTIFICATE"},
		{"garbage cert", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), ca.KeyPEM(), "parsing certificate"},
		{"no key", ca.CertPEM(), []byte("nope"), "no private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := ParseKeyPair(tt.cert, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKeyPair: %v", err)
			}
			if !kp.Cert.Equal(ca.Cert) || !bytes.Equal(kp.KeyPEM(), ca.KeyPEM()) {
				t.Error("round trip changed the pair")
			}
		})
	}
	if !strings.Contains(string(ca.KeyPEM()), "BEGIN PRIVATE KEY") {
		t.Errorf("KeyPEM is not PKCS#8:\n%s", ca.KeyPEM())
	}
}

func TestNewServiceAccountKey(t *testing.T) {
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := parsePrivateKeyPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := parsePublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Public().(*ecdsa.PublicKey).Equal(pk) {
		t.Error("public key does not match private key")
	}
}

var testSpec = ControlPlaneSpec{
	ClusterName:       "demo",
	APIServerDNSNames: []string{"demo.fke.local"},
	APIServerIPs:      []net.IP{net.ParseIP("10.96.0.1")},
	EtcdDNSNames:      []string{"etcd.demo"},
	EtcdIPs:           []net.IP{net.ParseIP("10.0.0.5")},
}

func mustBundle(t *testing.T, existing Bundle, spec ControlPlaneSpec) (Bundle, bool) {
	t.Helper()
	b, changed, err := EnsureBundle(existing, spec)
	if err != nil {
		t.Fatalf("EnsureBundle: %v", err)
	}
	for _, f := range RequiredFiles() {
		if len(b[f]) == 0 {
			t.Errorf("bundle lacks %s", f)
		}
	}
	return b, changed
}

func mustPair(t *testing.T, b Bundle, base string) *KeyPair {
	t.Helper()
	kp, err := b.KeyPair(base)
	if err != nil {
		t.Fatalf("KeyPair(%s): %v", base, err)
	}
	return kp
}

func TestEnsureBundleFreshAndStable(t *testing.T) {
	b, changed := mustBundle(t, nil, testSpec)
	if !changed {
		t.Error("fresh bundle: changed = false")
	}
	if n := len(RequiredFiles()); len(b) != n {
		t.Errorf("bundle has %d files, want %d", len(b), n)
	}
	again, changed := mustBundle(t, b, testSpec)
	if changed {
		t.Error("second EnsureBundle: changed = true")
	}
	if !maps.EqualFunc(b, again, bytes.Equal) {
		t.Error("second EnsureBundle changed the bundle")
	}
	if _, _, err := EnsureBundle(nil, ControlPlaneSpec{}); err == nil {
		t.Error("EnsureBundle without cluster name succeeded")
	}
}

func TestEnsureBundleChains(t *testing.T) {
	b, _ := mustBundle(t, nil, testSpec)
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	tests := []struct {
		base   string
		ca     string
		usages []x509.ExtKeyUsage
		cn     string
		org    []string
	}{
		{APIServer, CA, []x509.ExtKeyUsage{server}, "kube-apiserver", nil},
		{APIServerKubeletClient, CA, []x509.ExtKeyUsage{client}, "kube-apiserver-kubelet-client", []string{MastersGroup}},
		{APIServerWebhookClient, CA, []x509.ExtKeyUsage{client}, APIServerWebhookUser, nil},
		{Admin, CA, []x509.ExtKeyUsage{client}, AdminUser, []string{MastersGroup}},
		{ControllerManager, CA, []x509.ExtKeyUsage{client}, ControllerManagerUser, nil},
		{Scheduler, CA, []x509.ExtKeyUsage{client}, SchedulerUser, nil},
		{Manager, CA, []x509.ExtKeyUsage{client}, ManagerUser, []string{MastersGroup}},
		{FrontProxyClient, FrontProxyCA, []x509.ExtKeyUsage{client}, "front-proxy-client", nil},
		{EtcdServer, EtcdCA, []x509.ExtKeyUsage{server, client}, "etcd-server", nil},
		{EtcdPeer, EtcdCA, []x509.ExtKeyUsage{server, client}, EtcdPeerCommonName, nil},
		{APIServerEtcdClient, EtcdCA, []x509.ExtKeyUsage{client}, "kube-apiserver-etcd-client", nil},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			kp := mustPair(t, b, tt.base)
			ca := mustPair(t, b, tt.ca)
			for _, u := range tt.usages {
				if err := verify(kp.Cert, ca.Cert, u); err != nil {
					t.Errorf("verify against %s for usage %v: %v", tt.ca, u, err)
				}
			}
			for _, otherCA := range []string{CA, FrontProxyCA, EtcdCA} {
				if otherCA == tt.ca {
					continue
				}
				if err := verify(kp.Cert, mustPair(t, b, otherCA).Cert, tt.usages[0]); err == nil {
					t.Errorf("verifies against %s too", otherCA)
				}
			}
			if kp.Cert.Subject.CommonName != tt.cn || !slices.Equal(kp.Cert.Subject.Organization, tt.org) {
				t.Errorf("subject = %v, want CN=%s O=%v", kp.Cert.Subject, tt.cn, tt.org)
			}
		})
	}
}

func TestEnsureBundleSANs(t *testing.T) {
	b, _ := mustBundle(t, nil, testSpec)
	tests := []struct {
		base  string
		dns   []string
		ips   []string
		vhost string
	}{
		{APIServer, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local", "demo.fke.local"}, []string{"127.0.0.1", "10.96.0.1"}, "kubernetes.default.svc"},
		{EtcdServer, []string{"localhost", "etcd.demo"}, []string{"127.0.0.1", "10.0.0.5"}, "etcd.demo"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			c := mustPair(t, b, tt.base).Cert
			for _, d := range tt.dns {
				if !slices.Contains(c.DNSNames, d) {
					t.Errorf("DNS SANs %v lack %s", c.DNSNames, d)
				}
			}
			for _, ip := range tt.ips {
				if !slices.ContainsFunc(c.IPAddresses, net.ParseIP(ip).Equal) {
					t.Errorf("IP SANs %v lack %s", c.IPAddresses, ip)
				}
			}
			roots := x509.NewCertPool()
			roots.AddCert(mustPair(t, b, map[string]string{APIServer: CA, EtcdServer: EtcdCA}[tt.base]).Cert)
			for _, name := range []string{tt.vhost, tt.ips[1]} {
				if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
					t.Errorf("verify for host %s: %v", name, err)
				}
			}
		})
	}
}

func TestEnsureBundleRepairs(t *testing.T) {
	base, _ := mustBundle(t, nil, testSpec)
	foreign, _ := mustBundle(t, nil, ControlPlaneSpec{ClusterName: "other"})
	ca := mustPair(t, base, CA)
	expiring, err := ca.Issue(CertSpec{CommonName: AdminUser, Organization: []string{MastersGroup}, Usages: UsageClient, Validity: 10 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wrongSubject, err := ca.Issue(CertSpec{CommonName: "someone-else", Organization: []string{MastersGroup}, Usages: UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	// Flip a bit of the signature: the certificate still parses but no
	// longer verifies.
	der := bytes.Clone(mustPair(t, base, Admin).Cert.Raw)
	der[len(der)-1] ^= 0x01
	if _, err := x509.ParseCertificate(der); err != nil {
		t.Fatalf("tampered certificate does not parse: %v", err)
	}
	tamperedCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})

	tests := []struct {
		name   string
		mutate func(b Bundle)
		spec   ControlPlaneSpec
		// reissued lists the files expected to differ from base.
		reissued []string
	}{
		{"removed cert", func(b Bundle) { delete(b, AdminCertFile) }, testSpec,
			[]string{AdminCertFile, AdminKeyFile}},
		{"removed key", func(b Bundle) { delete(b, APIServerKeyFile) }, testSpec,
			[]string{APIServerCertFile, APIServerKeyFile}},
		{"garbage cert", func(b Bundle) { b[SchedulerCertFile] = []byte("garbage") }, testSpec,
			[]string{SchedulerCertFile, SchedulerKeyFile}},
		{"tampered cert", func(b Bundle) { b[AdminCertFile] = tamperedCert }, testSpec,
			[]string{AdminCertFile, AdminKeyFile}},
		{"key from another pair", func(b Bundle) { b[ManagerKeyFile] = b[AdminKeyFile] }, testSpec,
			[]string{ManagerCertFile, ManagerKeyFile}},
		{"foreign CA leaf", func(b Bundle) {
			b[AdminCertFile], b[AdminKeyFile] = foreign[AdminCertFile], foreign[AdminKeyFile]
		}, testSpec, []string{AdminCertFile, AdminKeyFile}},
		{"leaf signed by wrong CA of same bundle", func(b Bundle) {
			b[EtcdServerCertFile], b[EtcdServerKeyFile] = b[APIServerCertFile], b[APIServerKeyFile]
		}, testSpec, []string{EtcdServerCertFile, EtcdServerKeyFile}},
		{"expiring leaf", func(b Bundle) {
			b[AdminCertFile], b[AdminKeyFile] = expiring.CertPEM(), expiring.KeyPEM()
		}, testSpec, []string{AdminCertFile, AdminKeyFile}},
		{"wrong subject", func(b Bundle) {
			b[AdminCertFile], b[AdminKeyFile] = wrongSubject.CertPEM(), wrongSubject.KeyPEM()
		}, testSpec, []string{AdminCertFile, AdminKeyFile}},
		{"new API server SAN", func(Bundle) {}, func() ControlPlaneSpec {
			s := testSpec
			s.APIServerDNSNames = []string{"demo.fke.local", "api.example.com"}
			return s
		}(), []string{APIServerCertFile, APIServerKeyFile}},
		{"new etcd IP", func(Bundle) {}, func() ControlPlaneSpec {
			s := testSpec
			s.EtcdIPs = []net.IP{net.ParseIP("10.0.0.6")}
			return s
		}(), []string{EtcdServerCertFile, EtcdServerKeyFile}},
		// sa.pub is derived again from the kept sa.key, so it is byte-identical.
		{"removed sa.pub keeps sa.key", func(b Bundle) { delete(b, SAPubFile) }, testSpec, nil},
		// A bundle made before etcd peers used TLS gets the peer pair alone.
		{"bundle without etcd peer pair", func(b Bundle) { delete(b, EtcdPeerCertFile); delete(b, EtcdPeerKeyFile) }, testSpec,
			[]string{EtcdPeerCertFile, EtcdPeerKeyFile}},
		{"removed sa.key", func(b Bundle) { delete(b, SAKeyFile) }, testSpec,
			[]string{SAKeyFile, SAPubFile}},
		{"removed etcd CA key re-creates etcd CA and its leaves", func(b Bundle) { delete(b, EtcdCAKeyFile) }, testSpec,
			[]string{EtcdCACertFile, EtcdCAKeyFile, EtcdServerCertFile, EtcdServerKeyFile,
				EtcdPeerCertFile, EtcdPeerKeyFile, APIServerEtcdClientCertFile, APIServerEtcdClientKeyFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := maps.Clone(base)
			tt.mutate(in)
			snapshot := maps.Clone(in)
			got, changed := mustBundle(t, in, tt.spec)
			if !changed {
				t.Error("changed = false")
			}
			if !maps.EqualFunc(in, snapshot, bytes.Equal) {
				t.Error("EnsureBundle modified its input")
			}
			for f := range got {
				differs := !bytes.Equal(got[f], base[f])
				if want := slices.Contains(tt.reissued, f); differs != want {
					t.Errorf("%s: differs from original = %v, want %v", f, differs, want)
				}
			}
			// The repaired bundle is stable and consistent.
			if _, changed := mustBundle(t, got, tt.spec); changed {
				t.Error("EnsureBundle on the repaired bundle: changed = true")
			}
			for _, l := range leaves {
				kp := mustPair(t, got, l.base)
				if err := verify(kp.Cert, mustPair(t, got, l.ca).Cert, l.spec(tt.spec).Usages.extKeyUsages()[0]); err != nil {
					t.Errorf("%s does not verify against %s: %v", l.base, l.ca, err)
				}
			}
		})
	}
}

func TestKubeconfigRoundTrip(t *testing.T) {
	b, _ := mustBundle(t, nil, testSpec)
	data, err := Kubeconfig("demo", "https://127.0.0.1:6443", b[CACertFile], b[AdminCertFile], b[AdminKeyFile], AdminUser)
	if err != nil {
		t.Fatalf("Kubeconfig: %v", err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v", err)
	}
	ctxName := AdminUser + "@demo"
	if cfg.CurrentContext != ctxName {
		t.Errorf("current context = %q, want %q", cfg.CurrentContext, ctxName)
	}
	kctx := cfg.Contexts[ctxName]
	if kctx == nil || kctx.Cluster != "demo" || kctx.AuthInfo != AdminUser {
		t.Fatalf("context = %+v", kctx)
	}
	cluster, user := cfg.Clusters["demo"], cfg.AuthInfos[AdminUser]
	if cluster == nil || user == nil {
		t.Fatalf("cluster = %+v, user = %+v", cluster, user)
	}
	if cluster.Server != "https://127.0.0.1:6443" || !bytes.Equal(cluster.CertificateAuthorityData, b[CACertFile]) {
		t.Errorf("cluster = %s, CA data equal = %v", cluster.Server, bytes.Equal(cluster.CertificateAuthorityData, b[CACertFile]))
	}
	if !bytes.Equal(user.ClientCertificateData, b[AdminCertFile]) || !bytes.Equal(user.ClientKeyData, b[AdminKeyFile]) {
		t.Error("user credentials changed in the round trip")
	}
	rest, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatalf("RESTConfigFromKubeConfig: %v", err)
	}
	if rest.Host != "https://127.0.0.1:6443" {
		t.Errorf("rest host = %s", rest.Host)
	}
	for name, args := range map[string][3]string{
		"no cluster": {"", "https://x", "u"},
		"no server":  {"c", "", "u"},
		"no user":    {"c", "https://x", ""},
	} {
		if _, err := Kubeconfig(args[0], args[1], nil, nil, nil, args[2]); err == nil {
			t.Errorf("%s: Kubeconfig succeeded", name)
		}
	}
}

func TestTLSHandshake(t *testing.T) {
	b, _ := mustBundle(t, nil, testSpec)
	foreign, _ := mustBundle(t, nil, ControlPlaneSpec{ClusterName: "other"})

	serving := mustPair(t, b, APIServer)
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(mustPair(t, b, CA).Cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving.TLSCertificate()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		MinVersion:   tls.VersionTLS12,
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()

	tests := []struct {
		name    string
		client  Bundle
		base    string
		roots   Bundle
		wantErr bool
	}{
		{"admin", b, Admin, b, false},
		{"manager", b, Manager, b, false},
		{"client cert from another CA", foreign, Admin, b, true},
		{"server cert from another CA", b, Admin, foreign, true},
		{"front-proxy CA client", b, FrontProxyClient, b, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(tt.roots[CACertFile]) {
				t.Fatal("bad CA PEM")
			}
			cert := mustPair(t, tt.client, tt.base).TLSCertificate()
			client := &http.Client{
				Timeout: 10 * time.Second,
				Transport: &http.Transport{TLSClientConfig: &tls.Config{
					RootCAs:      roots,
					Certificates: []tls.Certificate{cert},
					ServerName:   "kubernetes.default.svc",
				}},
			}
			defer client.CloseIdleConnections()
			resp, err := client.Get(srv.URL)
			if tt.wantErr {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatal("request succeeded, want TLS failure")
				}
				return
			}
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if want := cert.Leaf.Subject.CommonName; string(body) != want {
				t.Errorf("server saw client %q, want %q", body, want)
			}
		})
	}
}

func TestKubeProxyKubeconfig(t *testing.T) {
	b, _, err := EnsureBundle(nil, ControlPlaneSpec{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := KubeProxyKubeconfig(b, "demo", "https://172.29.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	auth := cfg.AuthInfos[ctx.AuthInfo]
	kp, err := ParseKeyPair(auth.ClientCertificateData, auth.ClientKeyData)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := b.KeyPair(CA)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := kp.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("kube-proxy certificate does not verify against the cluster CA: %v", err)
	}
	if kp.Cert.Subject.CommonName != KubeProxyUser || cfg.Clusters[ctx.Cluster].Server != "https://172.29.0.1:6443" {
		t.Fatalf("subject %s, server %s", kp.Cert.Subject, cfg.Clusters[ctx.Cluster].Server)
	}
	if _, err := KubeProxyKubeconfig(Bundle{}, "demo", "https://x"); err == nil {
		t.Fatal("a bundle without a CA gave a kubeconfig")
	}
}
