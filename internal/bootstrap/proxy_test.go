package bootstrap_test

import (
	"context"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/test/testenv"
)

// goodProxyCSR is what node-a asks for its kube-proxy.
func goodProxyCSR() csrOpts {
	return csrOpts{
		user: "system:node:node-a", groups: []string{"system:nodes", "system:authenticated"},
		cn: "fke:kube-proxy:node-a", org: []string{"fke:kube-proxies"},
		usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		signer: certv1.KubeAPIServerClientSignerName,
	}
}

func proxyCSR(t *testing.T, name string, o csrOpts, lifetime time.Duration) *certv1.CertificateSigningRequest {
	t.Helper()
	csr := servingCSR(t, name, o)
	if lifetime > 0 {
		s := int32(lifetime.Seconds())
		csr.Spec.ExpirationSeconds = &s
	}
	return csr
}

func TestDecideProxyClient(t *testing.T) {
	tests := []struct {
		name     string
		mut      func(*csrOpts)
		lifetime time.Duration
		node     *corev1.Node
		want     bootstrap.Action
		reason   string
	}{
		{"its own kube-proxy", func(*csrOpts) {}, 24 * time.Hour, nodeA, bootstrap.Approve, bootstrap.ReasonProxyVerified},
		{"a shorter life", func(*csrOpts) {}, time.Hour, nodeA, bootstrap.Approve, ""},
		{"key encipherment allowed", func(o *csrOpts) { o.usages = append(o.usages, certv1.UsageKeyEncipherment) }, time.Hour, nodeA, bootstrap.Approve, ""},
		{"node not registered yet", func(*csrOpts) {}, time.Hour, nil, bootstrap.Wait, bootstrap.ReasonNotRegistered},
		{"no expiration (the signer's year)", func(*csrOpts) {}, 0, nodeA, bootstrap.Deny, bootstrap.ReasonLifetime},
		{"longer than a day", func(*csrOpts) {}, 25 * time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonLifetime},
		{"another node's kube-proxy", func(o *csrOpts) { o.cn = "fke:kube-proxy:node-b" }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonNodeMismatch},
		{"system:masters", func(o *csrOpts) { o.org = []string{"system:masters"} }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"an extra group", func(o *csrOpts) { o.org = append(o.org, "system:masters") }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"the shared kube-proxy user", func(o *csrOpts) { o.cn, o.org = "system:kube-proxy", nil }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"a node asking to be admin", func(o *csrOpts) { o.cn, o.org = "admin", nil }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"server usage", func(o *csrOpts) { o.usages = append(o.usages, certv1.UsageServerAuth) }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"no client usage", func(o *csrOpts) { o.usages = []certv1.KeyUsage{certv1.UsageDigitalSignature} }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"a DNS name", func(o *csrOpts) { o.dns = []string{"node-a"} }, time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonBadRequest},
		{"a kube-proxy identity asked by a user who is no node", func(o *csrOpts) { o.user, o.groups = "alice", []string{"system:authenticated"} },
			time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonNotANode},
		{"a bootstrap token holder", func(o *csrOpts) { o.user, o.groups = "system:bootstrap:abcdef", []string{"system:bootstrappers"} },
			time.Hour, nodeA, bootstrap.Deny, bootstrap.ReasonNotANode},
		{"someone else's client certificate", func(o *csrOpts) { o.user, o.groups, o.cn, o.org = "alice", nil, "alice", []string{"dev"} },
			time.Hour, nodeA, bootstrap.Ignore, ""},
		{"the kubelet's client signer", func(o *csrOpts) { o.signer = certv1.KubeAPIServerClientKubeletSignerName }, time.Hour, nodeA, bootstrap.Ignore, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := goodProxyCSR()
			tt.mut(&o)
			d := bootstrap.Decide(proxyCSR(t, "csr", o, tt.lifetime), tt.node)
			if d.Action != tt.want || (tt.reason != "" && d.Reason != tt.reason) {
				t.Fatalf("decision = %+v, want %s (%s)", d, tt.want, tt.reason)
			}
			if d.Action == bootstrap.Deny && d.Message == "" {
				t.Fatal("a denial must say why")
			}
		})
	}
	t.Run("already denied", func(t *testing.T) {
		csr := proxyCSR(t, "csr", goodProxyCSR(), time.Hour)
		csr.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue}}
		if d := bootstrap.DecideProxyClient(csr, nodeA); d.Action != bootstrap.Ignore {
			t.Fatalf("decision = %+v, want Ignore", d)
		}
	})
	t.Run("garbage request of a node", func(t *testing.T) {
		csr := proxyCSR(t, "csr", goodProxyCSR(), time.Hour)
		csr.Spec.Request = []byte("not a CSR")
		if d := bootstrap.DecideProxyClient(csr, nodeA); d.Action != bootstrap.Deny || d.Reason != bootstrap.ReasonBadRequest {
			t.Fatalf("decision = %+v, want Deny", d)
		}
	})
}

// The approver decides on kube-proxy CSRs beside serving ones, and leaves
// other users' client CSRs alone.
func TestApproverDecidesProxyCSRs(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(nodeA)
	foreign := goodProxyCSR()
	foreign.cn = "fke:kube-proxy:node-b"
	others := goodProxyCSR()
	others.user, others.groups, others.cn, others.org = "alice", nil, "alice", nil
	for _, csr := range []*certv1.CertificateSigningRequest{
		proxyCSR(t, "own", goodProxyCSR(), time.Hour), proxyCSR(t, "foreign", foreign, time.Hour),
		proxyCSR(t, "yearlong", goodProxyCSR(), 0), proxyCSR(t, "alice", others, time.Hour),
		servingCSR(t, "serving", goodCSR()),
	} {
		if _, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := &bootstrap.Approvers{}
	a.Ensure("default/demo", c)
	defer a.StopAll()
	want := map[string]struct {
		cond   certv1.RequestConditionType
		reason string
	}{
		"own":      {certv1.CertificateApproved, bootstrap.ReasonProxyVerified},
		"foreign":  {certv1.CertificateDenied, bootstrap.ReasonNodeMismatch},
		"yearlong": {certv1.CertificateDenied, bootstrap.ReasonLifetime},
		"serving":  {certv1.CertificateApproved, bootstrap.ReasonNodeVerified},
	}
	testenv.Eventually(t, 10*time.Second, "CSRs decided", func() error {
		for name, w := range want {
			csr, err := c.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got, reason := condition(csr); got != w.cond || reason != w.reason {
				return &mismatch{name, string(got) + " " + reason, string(w.cond) + " " + w.reason}
			}
		}
		return nil
	})
	if csr, _ := c.CertificatesV1().CertificateSigningRequests().Get(ctx, "alice", metav1.GetOptions{}); len(csr.Status.Conditions) != 0 {
		t.Fatalf("another user's client CSR was decided: %+v", csr.Status.Conditions)
	}
}

func TestCreateTokenHonoursTTL(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	pool, _, err := bootstrap.EnsureToken(ctx, c, "cpu", 24*time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok, exp, err := bootstrap.CreateToken(ctx, c, "cpu", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if tok == pool {
		t.Fatal("CreateToken handed out the pool's day-long token")
	}
	if left := time.Until(exp); left > 10*time.Minute || left < 9*time.Minute {
		t.Fatalf("token expires in %s, want 10m", left)
	}
	s, err := c.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+strings.Split(tok, ".")[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.StringData["expiration"]; got != exp.UTC().Format(time.RFC3339) || s.StringData["auth-extra-groups"] != bootstrap.PoolGroup("cpu") {
		t.Fatalf("secret expiration %q groups %q, want %s of pool cpu", got, s.StringData["auth-extra-groups"], exp.UTC().Format(time.RFC3339))
	}
	// The pool's own token stays the one EnsureToken hands out.
	if again, _, err := bootstrap.EnsureToken(ctx, c, "cpu", 24*time.Hour, time.Hour); err != nil || again != pool {
		t.Fatalf("EnsureToken after CreateToken = %q, %v; want the pool's %q", again, err, pool)
	}
	for _, bad := range []struct {
		pool string
		ttl  time.Duration
	}{{"cpu", 0}, {"cpu", -time.Minute}, {"Bad_Pool", time.Hour}} {
		if _, _, err := bootstrap.CreateToken(ctx, c, bad.pool, bad.ttl); err == nil {
			t.Errorf("CreateToken(%q, %s) succeeded", bad.pool, bad.ttl)
		}
	}
}
