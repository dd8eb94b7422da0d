package bootstrap_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/test/testenv"
)

func TestEnsureRBACIsIdempotent(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	for range 2 {
		if err := bootstrap.EnsureRBAC(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][2]string{
		bootstrap.BindingNodeBootstrapper:  {"system:node-bootstrapper", "system:bootstrappers"},
		bootstrap.BindingAutoApproveClient: {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
		bootstrap.BindingAutoApproveRenew:  {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
		bootstrap.BindingKubeProxies:       {"system:node-proxier", bootstrap.ProxyGroup},
	}
	list, err := c.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(want) {
		t.Fatalf("got %d bindings, want %d", len(list.Items), len(want))
	}
	for _, b := range list.Items {
		w, ok := want[b.Name]
		if !ok {
			t.Fatalf("unexpected binding %s", b.Name)
		}
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != w[0] || len(b.Subjects) != 1 ||
			b.Subjects[0].Kind != "Group" || b.Subjects[0].Name != w[1] {
			t.Errorf("binding %s = %+v %+v, want role %s for group %s", b.Name, b.RoleRef, b.Subjects, w[0], w[1])
		}
	}
}

func tokenSecret(t *testing.T, pool, id string, expires time.Time, mut func(*corev1.Secret)) corev1.Secret {
	t.Helper()
	s := bootstrap.TokenSecret(bootstrap.Token{ID: id, Secret: "0123456789abcdef", Expires: expires}, pool)
	if mut != nil {
		mut(s)
	}
	return *s
}

func TestCurrentToken(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hour := now.Add(time.Hour)
	tests := []struct {
		name    string
		secrets []corev1.Secret
		wantID  string // "" = none usable
	}{
		{"none", nil, ""},
		{"valid long enough", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, nil)}, "abcdef"},
		{"expires too soon", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", now.Add(5*time.Minute), nil)}, ""},
		{"expired", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", now.Add(-time.Minute), nil)}, ""},
		{"other pool", []corev1.Secret{tokenSecret(t, "gpu", "abcdef", hour, nil)}, ""},
		{"longest lived wins", []corev1.Secret{
			tokenSecret(t, "cpu", "aaaaaa", hour, nil),
			tokenSecret(t, "cpu", "bbbbbb", now.Add(2*time.Hour), nil),
		}, "bbbbbb"},
		{"not allowed to authenticate", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, func(s *corev1.Secret) {
			s.StringData["usage-bootstrap-authentication"] = "false"
		})}, ""},
		{"no expiration", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, func(s *corev1.Secret) {
			delete(s.StringData, "expiration")
		})}, ""},
		{"wrong group", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, func(s *corev1.Secret) {
			s.StringData["auth-extra-groups"] = "system:bootstrappers:fke:gpu"
		})}, ""},
		{"name does not match id", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, func(s *corev1.Secret) {
			s.Name = "bootstrap-token-zzzzzz"
		})}, ""},
		{"being deleted", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, func(s *corev1.Secret) {
			s.DeletionTimestamp = &metav1.Time{Time: now}
		})}, ""},
		{"data rather than stringData", []corev1.Secret{tokenSecret(t, "cpu", "abcdef", hour, func(s *corev1.Secret) {
			s.Data = map[string][]byte{}
			for k, v := range s.StringData {
				s.Data[k] = []byte(v)
			}
			s.StringData = nil
		})}, "abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := bootstrap.CurrentToken(tt.secrets, "cpu", now, 10*time.Minute)
			if tt.wantID == "" {
				if ok {
					t.Fatalf("got token %s, want none", got.ID)
				}
				return
			}
			if !ok || got.ID != tt.wantID {
				t.Fatalf("got %q (ok=%v), want %s", got.ID, ok, tt.wantID)
			}
		})
	}
}

func TestEnsureTokenReusesThenRenews(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	tok, exp, err := bootstrap.EnsureToken(ctx, c, "cpu", time.Hour, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(exp) < 59*time.Minute || time.Until(exp) > time.Hour {
		t.Fatalf("expires in %s, want about 1h", time.Until(exp))
	}
	s, err := c.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+strings.Split(tok, ".")[0], metav1.GetOptions{})
	if err != nil {
		t.Fatalf("token secret: %v", err)
	}
	if s.Type != corev1.SecretTypeBootstrapToken || s.Labels[fkev1.LabelNodePool] != "cpu" ||
		s.StringData["auth-extra-groups"] != "system:bootstrappers:fke:cpu" ||
		s.StringData["usage-bootstrap-signing"] != "true" || s.StringData["token-secret"] != strings.Split(tok, ".")[1] {
		t.Fatalf("secret = %+v", s)
	}

	again, _, err := bootstrap.EnsureToken(ctx, c, "cpu", time.Hour, 10*time.Minute)
	if err != nil || again != tok {
		t.Fatalf("second call = %q, %v; want the same token %q", again, err, tok)
	}
	other, _, err := bootstrap.EnsureToken(ctx, c, "gpu", time.Hour, 10*time.Minute)
	if err != nil || other == tok {
		t.Fatalf("another pool got %q, %v; want its own token", other, err)
	}
	// Asking for more validity than the token has left makes a new one.
	renewed, renewedExp, err := bootstrap.EnsureToken(ctx, c, "cpu", 2*time.Hour, 90*time.Minute)
	if err != nil || renewed == tok || !renewedExp.After(exp) {
		t.Fatalf("renewal = %q (expires %s), %v; want a new token outliving %s", renewed, renewedExp, err, exp)
	}
}

func TestEnsureTokenRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	for _, tc := range []struct {
		pool          string
		ttl, minValid time.Duration
		want          string
	}{
		{"Bad_Pool", time.Hour, 0, "pool name"},
		{"demo.cpu", time.Hour, 0, "pool name"},
		{"cpu", 0, 0, "ttl"},
		{"cpu", time.Minute, time.Hour, "at least minValid"},
	} {
		if _, _, err := bootstrap.EnsureToken(ctx, c, tc.pool, tc.ttl, tc.minValid); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EnsureToken(%q, %s, %s) = %v, want error about %s", tc.pool, tc.ttl, tc.minValid, err, tc.want)
		}
	}
	if l, _ := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("bad input created %d secrets", len(l.Items))
	}
}

func TestBootstrapKubeconfig(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	kc, err := bootstrap.BootstrapKubeconfig("https://172.29.0.1:6443", ca, "abcdef.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster].Server != "https://172.29.0.1:6443" ||
		string(cfg.Clusters[ctx.Cluster].CertificateAuthorityData) != string(ca) ||
		cfg.AuthInfos[ctx.AuthInfo].Token != "abcdef.0123456789abcdef" {
		t.Fatalf("kubeconfig = %s", kc)
	}
	for _, bad := range []struct {
		server, token string
		ca            []byte
	}{
		{"http://172.29.0.1:6443", "abcdef.0123456789abcdef", ca},
		{"172.29.0.1:6443", "abcdef.0123456789abcdef", ca},
		{"https://172.29.0.1:6443", "abcdef.0123456789abcdef", nil},
		{"https://172.29.0.1:6443", "abc.def", ca},
	} {
		if _, err := bootstrap.BootstrapKubeconfig(bad.server, bad.ca, bad.token); err == nil {
			t.Errorf("BootstrapKubeconfig(%q, %q) succeeded, want an error", bad.server, bad.token)
		}
	}
}

// csrOpts describes a kubelet serving CSR for a test.
type csrOpts struct {
	user   string
	groups []string
	cn     string
	org    []string
	dns    []string
	ips    []string
	emails []string
	uris   []string
	usages []certv1.KeyUsage
	signer string
}

func servingCSR(t *testing.T, name string, o csrOpts) *certv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: o.cn, Organization: o.org}, DNSNames: o.dns, EmailAddresses: o.emails}
	for _, ip := range o.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range o.uris {
		pu, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: o.signer, Usages: o.usages, Username: o.user, Groups: o.groups,
		},
	}
}

// goodCSR is what a kubelet of node-a at 172.29.0.10 asks for.
func goodCSR() csrOpts {
	return csrOpts{
		user: "system:node:node-a", groups: []string{"system:nodes", "system:authenticated"},
		cn: "system:node:node-a", org: []string{"system:nodes"},
		dns: []string{"node-a"}, ips: []string{"172.29.0.10"},
		usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
		signer: certv1.KubeletServingSignerName,
	}
}

func node(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

var nodeA = node("node-a",
	corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.29.0.10"},
	corev1.NodeAddress{Type: corev1.NodeHostName, Address: "node-a"})

func TestDecideServing(t *testing.T) {
	tests := []struct {
		name   string
		mut    func(*csrOpts)
		node   *corev1.Node
		want   bootstrap.Action
		reason string
	}{
		{"matching node", func(*csrOpts) {}, nodeA, bootstrap.Approve, bootstrap.ReasonNodeVerified},
		{"key encipherment allowed", func(o *csrOpts) { o.usages = append(o.usages, certv1.UsageKeyEncipherment) }, nodeA, bootstrap.Approve, ""},
		{"hostname address allowed", func(o *csrOpts) { o.dns = append(o.dns, "host-a") }, node("node-a",
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.29.0.10"},
			corev1.NodeAddress{Type: corev1.NodeHostName, Address: "host-a"}), bootstrap.Approve, ""},
		{"another signer", func(o *csrOpts) { o.signer = certv1.KubeAPIServerClientKubeletSignerName }, nodeA, bootstrap.Ignore, ""},
		{"node not registered yet", func(*csrOpts) {}, nil, bootstrap.Wait, bootstrap.ReasonNotRegistered},
		{"foreign node's name", func(o *csrOpts) { o.dns = []string{"node-b"} }, nodeA, bootstrap.Deny, bootstrap.ReasonNodeMismatch},
		{"wrong IP", func(o *csrOpts) { o.ips = []string{"172.29.0.11"} }, nodeA, bootstrap.Deny, bootstrap.ReasonNodeMismatch},
		{"external IP is not enough", func(o *csrOpts) { o.ips = []string{"203.0.113.7"} }, node("node-a",
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.29.0.10"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.7"}), bootstrap.Deny, bootstrap.ReasonNodeMismatch},
		{"not a node", func(o *csrOpts) { o.user, o.groups = "alice", []string{"system:authenticated"} }, nodeA, bootstrap.Deny, bootstrap.ReasonNotANode},
		{"node user without nodes group", func(o *csrOpts) { o.groups = []string{"system:authenticated"} }, nodeA, bootstrap.Deny, bootstrap.ReasonNotANode},
		{"subject of another node", func(o *csrOpts) { o.cn = "system:node:node-b" }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"wrong organization", func(o *csrOpts) { o.org = []string{"system:masters"} }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"client usage", func(o *csrOpts) { o.usages = append(o.usages, certv1.UsageClientAuth) }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"no server usage", func(o *csrOpts) { o.usages = []certv1.KeyUsage{certv1.UsageDigitalSignature} }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"email SAN", func(o *csrOpts) { o.emails = []string{"a@example.com"} }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"URI SAN", func(o *csrOpts) { o.uris = []string{"spiffe://x/y"} }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"no SANs", func(o *csrOpts) { o.dns, o.ips = nil, nil }, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := goodCSR()
			tt.mut(&o)
			d := bootstrap.DecideServing(servingCSR(t, "csr", o), tt.node)
			if d.Action != tt.want || (tt.reason != "" && d.Reason != tt.reason) {
				t.Fatalf("decision = %+v, want %s (%s)", d, tt.want, tt.reason)
			}
			if d.Action == bootstrap.Deny && d.Message == "" {
				t.Fatal("a denial must say why")
			}
		})
	}
	t.Run("already approved", func(t *testing.T) {
		csr := servingCSR(t, "csr", goodCSR())
		csr.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue}}
		if d := bootstrap.DecideServing(csr, nodeA); d.Action != bootstrap.Ignore {
			t.Fatalf("decision = %+v, want Ignore", d)
		}
	})
	t.Run("garbage request", func(t *testing.T) {
		csr := servingCSR(t, "csr", goodCSR())
		csr.Spec.Request = []byte("not a CSR")
		if d := bootstrap.DecideServing(csr, nodeA); d.Action != bootstrap.Deny || d.Reason != bootstrap.ReasonBadRequest {
			t.Fatalf("decision = %+v, want Deny", d)
		}
	})
}

func condition(csr *certv1.CertificateSigningRequest) (certv1.RequestConditionType, string) {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1.CertificateApproved || c.Type == certv1.CertificateDenied {
			return c.Type, c.Reason
		}
	}
	return "", ""
}

func TestServingApproverApprovesAndDenies(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientset(nodeA)
	good := servingCSR(t, "good", goodCSR())
	foreign := goodCSR()
	foreign.dns = []string{"node-b"}
	late := goodCSR()
	late.user, late.cn, late.dns, late.ips = "system:node:node-c", "system:node:node-c", []string{"node-c"}, []string{"172.29.0.12"}
	for _, csr := range []*certv1.CertificateSigningRequest{good, servingCSR(t, "foreign", foreign), servingCSR(t, "late", late)} {
		if _, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := &bootstrap.Approvers{}
	a.Ensure("default/demo", c)
	a.Ensure("default/demo", c) // idempotent
	defer a.StopAll()

	want := map[string]certv1.RequestConditionType{"good": certv1.CertificateApproved, "foreign": certv1.CertificateDenied}
	check := func(want map[string]certv1.RequestConditionType) func() error {
		return func() error {
			for name, w := range want {
				csr, err := c.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if got, _ := condition(csr); got != w {
					return &mismatch{name, string(got), string(w)}
				}
			}
			return nil
		}
	}
	testenv.Eventually(t, 10*time.Second, "CSRs decided", check(want))
	if csr, _ := c.CertificatesV1().CertificateSigningRequests().Get(ctx, "late", metav1.GetOptions{}); len(csr.Status.Conditions) != 0 {
		t.Fatalf("the CSR of an unregistered node was decided: %+v", csr.Status.Conditions)
	}
	// Once its node registers, the waiting CSR is approved.
	if _, err := c.CoreV1().Nodes().Create(ctx, node("node-c", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.29.0.12"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "late CSR approved", check(map[string]certv1.RequestConditionType{"late": certv1.CertificateApproved}))
	a.Stop("default/demo")
	if a.Running("default/demo") {
		t.Fatal("approver still running after Stop")
	}
}

type mismatch struct{ name, got, want string }

func (m *mismatch) Error() string { return m.name + ": condition " + m.got + ", want " + m.want }
