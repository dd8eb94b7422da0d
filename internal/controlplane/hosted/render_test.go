package hosted

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
)

func TestNamespace(t *testing.T) {
	long := "team-" + strings.Repeat("a", 40) + "/cluster-" + strings.Repeat("b", 40)
	for _, tc := range []struct{ key, want string }{
		{"default/demo", "fke-default-demo"},
		{"team-a/gpu", "fke-team-a-gpu"},
	} {
		if got := Namespace(tc.key); got != tc.want {
			t.Errorf("Namespace(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	got := Namespace(long)
	if len(got) > 63 || !strings.HasPrefix(got, "fke-team-") || strings.Contains(got, "--") {
		t.Errorf("Namespace(long) = %q (%d characters): want a DNS label of at most 63", got, len(got))
	}
	if Namespace(long) != got || Namespace(long+"x") == got {
		t.Errorf("Namespace of long keys is not stable and distinct: %q", got)
	}
}

func testPlane(t *testing.T, datastore string) plane {
	t.Helper()
	b, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	// The cluster controller adds the encryption configuration.
	if b[encryption.ConfigFile], _, err = encryption.Ensure(nil); err != nil {
		t.Fatal(err)
	}
	p := plane{
		spec: controlplane.Spec{Key: "default/demo", Version: "v1.37.2", PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16", PKI: b,
			ComponentVersions: map[string]string{controlplane.Scheduler: "v1.36.3"}},
		namespace: "fke-default-demo", nodePort: 31443, endpointHost: "172.29.1.2", datastore: datastore,
		apiServerReplicas: 2, etcdReplicas: 3,
		image: func(c, v string) string { return "reg/" + c + ":" + v },
	}
	if datastore == Shared {
		p.etcdServers, p.etcdPrefix = etcdURLs(SharedEtcdName, "fke-system", 3), Prefix(p.namespace)
	} else {
		p.etcdServers = etcdURLs(EtcdService, p.namespace, 3)
	}
	return p
}

func TestAPIServerArgs(t *testing.T) {
	for _, tc := range []struct {
		datastore    string
		want, absent []string
	}{
		{
			datastore: Dedicated,
			want: []string{"--secure-port=31443", "--advertise-address=172.29.1.2", "--bind-address=0.0.0.0",
				// It presents its webhook client certificate to webhooks (the VPA's).
				"--admission-control-config-file=/etc/fke/admission.yaml",
				// etcd slow for a moment on a busy cluster is not unready.
				"--etcd-readycheck-timeout=10s",
				"--etcd-servers=https://etcd-0.etcd.fke-default-demo.svc:2379,https://etcd-1.etcd.fke-default-demo.svc:2379,https://etcd-2.etcd.fke-default-demo.svc:2379"},
			absent: []string{"--etcd-prefix=", "--etcd-compaction-interval="},
		},
		{
			datastore: Shared,
			want: []string{"--etcd-prefix=/fke/fke-default-demo", "--etcd-compaction-interval=0", "--etcd-readycheck-timeout=10s",
				"--etcd-servers=https://fke-etcd-0.fke-etcd.fke-system.svc:2379,https://fke-etcd-1.fke-etcd.fke-system.svc:2379,https://fke-etcd-2.fke-etcd.fke-system.svc:2379"},
		},
	} {
		args := testPlane(t, tc.datastore).apiServerArgs()
		for _, w := range tc.want {
			if !slices.Contains(args, w) {
				t.Errorf("%s: API server args lack %s:\n%s", tc.datastore, w, strings.Join(args, "\n"))
			}
		}
		for _, a := range tc.absent {
			if slices.ContainsFunc(args, func(s string) bool { return strings.HasPrefix(s, a) }) {
				t.Errorf("%s: API server args hold %s", tc.datastore, a)
			}
		}
	}
}

// Every file a component mounts is in the Secret, and the CA's key goes
// to kube-controller-manager (it signs) and nowhere else.
func TestComponentsMountOnlyWhatTheyRead(t *testing.T) {
	p := testPlane(t, Dedicated)
	data, err := secretData(p.spec, p.namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{datastoreCA, datastoreCert, datastoreKey} {
		data[k] = []byte("x")
	}
	for _, c := range controlplane.Components {
		keys := componentKeys(c)
		if len(keys) == 0 {
			t.Errorf("%s mounts nothing", c)
		}
		for _, k := range keys {
			if _, ok := data[k]; !ok {
				t.Errorf("%s mounts %s, which the Secret does not hold", c, k)
			}
		}
		if hasCAKey := slices.Contains(keys, pki.CAKeyFile); hasCAKey != (c == controlplane.ControllerManager) {
			t.Errorf("%s mounts the CA key: %v", c, hasCAKey)
		}
	}
}

func TestComponents(t *testing.T) {
	p := testPlane(t, Dedicated)
	p.secretHash = "h1"
	ds := p.components()
	if len(ds) != 3 {
		t.Fatalf("%d Deployments, want 3", len(ds))
	}
	for _, tc := range []struct {
		name     string
		replicas int32
		image    string
		port     int32
		// readyEvery is the readiness period: short where the Service's
		// endpoints follow it.
		readyEvery int32
	}{
		{controlplane.APIServer, 2, "reg/kube-apiserver:v1.37.2", 31443, 2},
		{controlplane.ControllerManager, 1, "reg/kube-controller-manager:v1.37.2", controllerManagerPort, 10},
		// A component not yet upgraded starts at the version it ran.
		{controlplane.Scheduler, 1, "reg/kube-scheduler:v1.36.3", schedulerPort, 10},
	} {
		i := slices.IndexFunc(ds, func(d *appsv1.Deployment) bool { return d.Name == tc.name })
		if i < 0 {
			t.Errorf("no Deployment %s", tc.name)
			continue
		}
		d := ds[i]
		c := d.Spec.Template.Spec.Containers[0]
		if *d.Spec.Replicas != tc.replicas || c.Image != tc.image || c.ReadinessProbe.HTTPGet.Port.IntValue() != int(tc.port) {
			t.Errorf("%s: replicas %d, image %s, probe port %d; want %d, %s, %d", tc.name, *d.Spec.Replicas, c.Image,
				c.ReadinessProbe.HTTPGet.Port.IntValue(), tc.replicas, tc.image, tc.port)
		}
		if c.ReadinessProbe.PeriodSeconds != tc.readyEvery {
			t.Errorf("%s: readiness probed every %d s, want %d", tc.name, c.ReadinessProbe.PeriodSeconds, tc.readyEvery)
		}
		if d.Namespace != p.namespace || d.Spec.Template.Annotations[AnnotationSecretHash] != "h1" {
			t.Errorf("%s: namespace %s, secret hash %q", tc.name, d.Namespace, d.Spec.Template.Annotations[AnnotationSecretHash])
		}
		if d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
			t.Errorf("%s: replicas are not spread across nodes", tc.name)
		}
		if d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
			t.Errorf("%s: a rolling update may stop a replica before its successor serves", tc.name)
		}
		// A live component is restarted only after minutes without an
		// answer: on a busy management cluster slow is not dead.
		if l := c.LivenessProbe; l.PeriodSeconds*l.FailureThreshold < 180 {
			t.Errorf("%s: restarted after %d s without an answer, want at least 3 minutes", tc.name, l.PeriodSeconds*l.FailureThreshold)
		}
		if tc.name == controlplane.ControllerManager {
			// It elects a leader, and rides out a slow API server.
			for _, want := range []string{"--leader-elect=true", "--leader-elect-renew-deadline=40s"} {
				if !slices.Contains(c.Command, want) {
					t.Errorf("%s: command lacks %s: %v", tc.name, want, c.Command)
				}
			}
		}
	}
}

func TestEtcdCluster(t *testing.T) {
	for _, replicas := range []int32{1, 3, 5} {
		sts, svc, budget := etcdCluster("etcd", "ns", SecretName, "reg/etcd:3.7.0", replicas, []string{"--extra"}, "h")
		args := sts.Spec.Template.Spec.Containers[0].Command
		var initial string
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--initial-cluster="); ok {
				initial = v
			}
		}
		if got := len(strings.Split(initial, ",")); got != int(replicas) {
			t.Errorf("%d members: --initial-cluster names %d: %s", replicas, got, initial)
		}
		if !strings.Contains(initial, "etcd-0=https://etcd-0.etcd.ns.svc:2380") || !slices.Contains(args, "--extra") {
			t.Errorf("%d members: args %v", replicas, args)
		}
		if budget.Spec.MinAvailable.IntValue() != int(replicas/2+1) {
			t.Errorf("%d members: PDB keeps %s, want a quorum of %d", replicas, budget.Spec.MinAvailable.String(), replicas/2+1)
		}
		if !svc.Spec.PublishNotReadyAddresses || svc.Spec.ClusterIP != "None" {
			t.Errorf("%d members: members cannot find each other before they are ready", replicas)
		}
		if p := sts.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds; p != 10 {
			t.Errorf("%d members: readiness, which no traffic follows, probed every %d s, want 10", replicas, p)
		}
		// A member's cluster state is the pod's annotation, read at each
		// start: "new" unless the runtime replaced the member.
		c := sts.Spec.Template.Spec.Containers[0]
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--initial-cluster-state") }) {
			t.Errorf("%d members: --initial-cluster-state is a flag, which would shadow the pod's annotation", replicas)
		}
		var fromAnnotation bool
		for _, e := range c.Env {
			if e.Name == "ETCD_INITIAL_CLUSTER_STATE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
				e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['"+AnnotationEtcdClusterState+"']" {
				fromAnnotation = true
			}
		}
		if !fromAnnotation || sts.Spec.Template.Annotations[AnnotationEtcdClusterState] != "new" {
			t.Errorf("%d members: the cluster state does not come from the pod's annotation (new by default): %v %v", replicas, c.Env, sts.Spec.Template.Annotations)
		}
		if !slices.Contains(args, "--data-dir=/var/lib/etcd/$(ETCD_INITIAL_CLUSTER_STATE)") {
			t.Errorf("%d members: not one data directory per cluster state: %v", replicas, args)
		}
		if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("%d members: etcd's last log lines are not its termination message", replicas)
		}
	}
}
