package addons

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestDNSServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.96.0.0/16": "10.96.0.10", "10.96.0.0/12": "10.96.0.10", "172.20.5.0/24": "172.20.5.10", "10.96.0.7/16": "10.96.0.10",
	} {
		if got, err := DNSServiceIP(cidr); err != nil || got.String() != want {
			t.Errorf("DNSServiceIP(%s) = %s, %v; want %s", cidr, got, err, want)
		}
	}
	for _, bad := range []string{"", "10.96.0.0", "fd00::/64", "10.96.0.0/30"} {
		if _, err := DNSServiceIP(bad); err == nil {
			t.Errorf("DNSServiceIP(%q) succeeded", bad)
		}
	}
}

func TestCorefileForwardsNothing(t *testing.T) {
	cf := Corefile("")
	if strings.Contains(cf, "forward") || strings.Contains(cf, "resolv.conf") || strings.Contains(cf, "proxy") {
		t.Fatalf("Corefile sends lookups out of the cluster:\n%s", cf)
	}
	if !strings.Contains(cf, "kubernetes cluster.local in-addr.arpa") {
		t.Fatalf("Corefile does not serve the cluster domain:\n%s", cf)
	}
	if !strings.Contains(Corefile("corp.internal"), "kubernetes corp.internal ") {
		t.Fatal("domain not used")
	}
}

func TestEnsureCoreDNS(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	opts := DNSOptions{Image: "172.29.0.1:5000/fke/coredns:v1.15.0", ServiceCIDR: "10.96.0.0/16"}
	for range 2 {
		if err := EnsureCoreDNS(ctx, c, opts); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := c.CoreV1().Services("kube-system").Get(ctx, DNSServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || len(svc.Spec.Ports) != 3 || svc.Spec.Selector["k8s-app"] != "kube-dns" {
		t.Fatalf("service = %+v", svc.Spec)
	}
	d, err := c.AppsV1().Deployments("kube-system").Get(ctx, DNSName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if *d.Spec.Replicas != 2 || pod.Containers[0].Image != opts.Image || pod.ServiceAccountName != DNSName ||
		pod.DNSPolicy != "Default" || d.Spec.Template.Labels["k8s-app"] != "kube-dns" {
		t.Fatalf("deployment = %+v", d.Spec)
	}
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, DNSName, metav1.GetOptions{})
	if err != nil || cm.Data["Corefile"] != Corefile("") {
		t.Fatalf("configmap: %v %+v", err, cm)
	}
	crb, err := c.RbacV1().ClusterRoleBindings().Get(ctx, DNSClusterRole, metav1.GetOptions{})
	if err != nil || crb.Subjects[0].Name != DNSName || crb.Subjects[0].Namespace != "kube-system" {
		t.Fatalf("binding: %v %+v", err, crb)
	}
	if _, err := c.CoreV1().ServiceAccounts("kube-system").Get(ctx, DNSName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	empty := fake.NewClientset()
	for _, bad := range []DNSOptions{{ServiceCIDR: "10.96.0.0/16"}, {Image: "x", ServiceCIDR: "nonsense"}} {
		if err := EnsureCoreDNS(ctx, empty, bad); err == nil {
			t.Errorf("EnsureCoreDNS(%+v) succeeded", bad)
		}
	}
	if l, _ := empty.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatal("bad options created objects")
	}
}
