package localnode

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/controlplane/hosted"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/internal/versions"
	"fke.dev/fke/test/testenv"
)

// testHostedClusters runs after the chart was upgraded to the hosted
// runtime (two manager replicas): two Clusters, one per datastore, are
// created as a user creates them; the leader's pod is deleted while they
// are being reconciled; both become Ready, each serves its own admin
// kubeconfig and refuses the other's; hosted-a's addons (metrics-server,
// the GPU metrics adapter, the VPA) run as pods beside its control plane
// and serve through its API server; deleting them removes everything they
// owned.
func testHostedClusters(t *testing.T, e *testenv.Env, cs kubernetes.Interface, mgmtKubeconfig string) {
	scheme, err := manager.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.TenantConfig("mgmt"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	nodeReg := e.WaitSystemImages() // as nodes reach it
	clusters := map[string]fkev1.Datastore{"hosted-a": fkev1.DatastoreDedicated, "hosted-b": fkev1.DatastoreShared}
	// Pod ranges of their own: the manager in its pod cannot see the
	// management cluster's range, and a host joined to hosted-a routes both.
	podCIDRs := map[string]string{"hosted-a": "10.200.0.0/16", "hosted-b": "10.204.0.0/16"}
	// hosted-b starts a minor behind, and is upgraded below.
	versionOf := map[string]string{"hosted-a": versions.Default, "hosted-b": versions.Previous}
	start := time.Now()
	for name, ds := range clusters {
		cl := &fkev1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:       fkev1.ClusterSpec{Runtime: fkev1.RuntimeHosted, Datastore: ds, Version: versionOf[name], Network: fkev1.ClusterNetwork{PodCIDR: podCIDRs[name]}},
		}
		if name == "hosted-a" {
			cl.Spec.Addons.VerticalPodAutoscaler.Enabled = true // and the default ones
		} else {
			cl.Spec.Addons = fkev1.ClusterAddons{
				MetricsServer: fkev1.MetricsServerAddon{Enabled: ptr.To(false)},
				GPUMetrics:    fkev1.GPUMetricsAddon{Enabled: ptr.To(false)},
			}
		}
		if err := c.Create(t.Context(), cl); err != nil {
			t.Fatal(err)
		}
	}
	// Mid-reconcile: the leader goes, another replica takes over.
	leader := leaderPod(t, cs, "")
	testenv.Eventually(t, time.Minute, "the manager started on the clusters", func() error {
		for name := range clusters {
			cl := &fkev1.Cluster{}
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
				return err
			}
			if len(cl.Finalizers) == 0 {
				return fmt.Errorf("%s has no finalizer yet", name)
			}
		}
		return nil
	})
	if err := cs.CoreV1().Pods(helmNamespace).Delete(t.Context(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cfgs := map[string]*rest.Config{}
	for name := range clusters {
		testenv.Eventually(t, 8*time.Minute, name+" Ready", func() error {
			cl := &fkev1.Cluster{}
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
				return fmt.Errorf("conditions %+v", cl.Status.Conditions)
			}
			return nil
		})
		t.Logf("FIGURE hosted cluster %s (%s etcd) created -> Ready, with the leader's pod deleted on the way: %s",
			name, clusters[name], time.Since(start).Round(100*time.Millisecond))
		s := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: fkev1.KubeconfigSecretName(name)}, s); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[fkev1.KubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		cfgs[name] = cfg
	}

	t.Run("each admin kubeconfig works, and not on the other cluster", func(t *testing.T) {
		for name, cfg := range cfgs {
			tcs := kubernetes.NewForConfigOrDie(cfg)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "owned-by-" + name}}
			if _, err := tcs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		a, b := rest.CopyConfig(cfgs["hosted-a"]), cfgs["hosted-b"]
		a.Host = b.Host
		a.TLSClientConfig.CAData = b.TLSClientConfig.CAData
		if _, err := kubernetes.NewForConfigOrDie(a).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			t.Errorf("hosted-a's admin on hosted-b: %v, want 401 Unauthorized", err)
		}
	})
	t.Run("nothing is made twice", func(t *testing.T) {
		for name := range clusters {
			ns := hosted.Namespace("default/" + name)
			var svcs corev1.ServiceList
			if err := c.List(t.Context(), &svcs, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			want := 1 // the API server's
			if clusters[name] == fkev1.DatastoreDedicated {
				want = 2 // and etcd's
			}
			if name == "hosted-a" {
				want += 3 // and its three addons'
			}
			if len(svcs.Items) != want {
				t.Errorf("%s: %d Services in %s, want %d", name, len(svcs.Items), ns, want)
			}
		}
	})
	t.Run("a hosted cluster's addons run beside its control plane and serve through its API", func(t *testing.T) {
		testHostedAddons(t, c, "hosted-a", cfgs["hosted-a"])
	})
	t.Run("a hosted cluster upgrades a minor with its API answering", func(t *testing.T) {
		e := e.For(t)
		testHostedUpgrade(t, e, c, mgmtKubeconfig, "hosted-b", cfgs["hosted-b"])
	})
	t.Run("a hosted cluster's snapshot restores into a new hosted cluster", func(t *testing.T) {
		e := e.For(t)
		// Through the manager in its pod: the snapshot exports hosted-b's
		// keys from the shared etcd; the restore imports them under
		// hosted-c's prefix before its API server starts.
		out := e.MustRun("--kubeconfig", mgmtKubeconfig, "cluster", "backup", "hosted-b")
		m := regexp.MustCompile(`snapshot (\S+): (\d+) bytes`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("fke cluster backup printed no snapshot:\n%s", out)
		}
		t.Logf("FIGURE snapshot of hosted cluster hosted-b (shared etcd): %s bytes", m[2])
		tcs := kubernetes.NewForConfigOrDie(cfgs["hosted-b"])
		late := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after-the-snapshot"}}
		if _, err := tcs.CoreV1().Namespaces().Create(t.Context(), late, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e.MustRun("--kubeconfig", mgmtKubeconfig, "cluster", "restore", "hosted-c", "--from", "hosted-b/"+m[1])
		// As long as a new hosted cluster may take (the CLI's own wait
		// would outlast the test environment's limit on one command).
		testenv.Eventually(t, 8*time.Minute, "hosted-c Ready", func() error {
			cl := &fkev1.Cluster{}
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "hosted-c"}, cl); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady) {
				return fmt.Errorf("conditions %+v", cl.Status.Conditions)
			}
			return nil
		})
		t.Logf("FIGURE hosted cluster hosted-c restored from hosted-b's snapshot -> Ready: %s", time.Since(start).Round(100*time.Millisecond))
		s := &corev1.Secret{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: fkev1.KubeconfigSecretName("hosted-c")}, s); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[fkev1.KubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		rcs := kubernetes.NewForConfigOrDie(cfg)
		if _, err := rcs.CoreV1().Namespaces().Get(t.Context(), "owned-by-hosted-b", metav1.GetOptions{}); err != nil {
			t.Errorf("hosted-c lacks hosted-b's namespace from the snapshot: %v", err)
		}
		if _, err := rcs.CoreV1().Namespaces().Get(t.Context(), late.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("hosted-c holds a namespace made after the snapshot: %v", err)
		}
		if err := c.Delete(t.Context(), &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hosted-c"}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 4*time.Minute, "hosted-c and its namespace gone", func() error {
			if err := c.Get(t.Context(), client.ObjectKey{Name: hosted.Namespace("default/hosted-c")}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace still there (%v)", err)
			}
			return nil
		})
	})
	t.Run("a kwok pool of a hosted cluster scales up from zero for a GPU pod", func(t *testing.T) {
		defer func() {
			if t.Failed() {
				dumpHosted(t, cs) // the kwok pod beside the control plane
			}
		}()
		// Simulated nodes of a hosted cluster are kept by a kwok Deployment
		// next to its control plane; the autoscaler works unchanged.
		np := &fkev1.NodePool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fkev1.NodePoolObjectName("hosted-b", "gpu")},
			Spec: fkev1.NodePoolSpec{ClusterName: "hosted-b", PoolName: "gpu", InstanceType: "gpu-h100x8", Provider: fkev1.ProviderKwok,
				Autoscaling: &fkev1.NodePoolAutoscaling{MinSize: 0, MaxSize: 2}},
		}
		if err := c.Create(t.Context(), np); err != nil {
			t.Fatal(err)
		}
		tcs := kubernetes.NewForConfigOrDie(cfgs["hosted-b"])
		// Written as users write GPU pods: no toleration of the GPU taint.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "train", Image: "trainer:v1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
			}}},
		}
		// Until the tenant's controller-manager has made the default
		// ServiceAccount, pods are refused (as on any new cluster).
		testenv.Eventually(t, time.Minute, "creating the GPU pod", func() error {
			_, err := tcs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{})
			return err
		})
		start := time.Now()
		testenv.Eventually(t, 4*time.Minute, "the GPU pod Running on a new node", func() error {
			p, err := tcs.CoreV1().Pods("default").Get(t.Context(), pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
				return fmt.Errorf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
			}
			return nil
		})
		t.Logf("FIGURE hosted cluster: pending GPU pod -> Running on a new kwok node: %s", time.Since(start).Round(100*time.Millisecond))
		testenv.Eventually(t, time.Minute, "kwok's Deployment next to hosted-b's control plane ready", func() error {
			d := &appsv1.Deployment{}
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: hosted.Namespace("default/hosted-b"), Name: hosted.KwokName}, d); err != nil {
				return err
			}
			if d.Status.ReadyReplicas != 1 {
				return fmt.Errorf("%d ready replicas", d.Status.ReadyReplicas)
			}
			return nil
		})
		nodes, err := tcs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=gpu"})
		if err != nil || len(nodes.Items) != 1 {
			t.Errorf("hosted-b's gpu pool has %d nodes (%v), want 1 for one 8-GPU pod", len(nodes.Items), err)
		}
	})
	t.Run("a host joined to a hosted cluster runs a pod", func(t *testing.T) {
		e := e.For(t)
		tcs := kubernetes.NewForConfigOrDie(cfgs["hosted-a"])
		file := filepath.Join(t.TempDir(), "bootstrap.yaml")
		data := e.MustRun("--kubeconfig", mgmtKubeconfig, "node", "bootstrap-file", "hosted-a", "--pool", "metal")
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(e.Fke, "--data-dir", e.DataDir, "--bin-dir", e.BinDir, "node", "join", "--bootstrap", file, "--name", "hosted-metal")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if t.Failed() {
				t.Logf("fke node join so far:\n%s", out.String())
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "removed from this host") {
				t.Errorf("fke node join: %v\n%s", err, out.String())
			}
		}()
		testenv.Eventually(t, 3*time.Minute, "node hosted-metal Ready in hosted-a", func() error {
			n, err := tcs.CoreV1().Nodes().Get(t.Context(), "hosted-metal", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeutil.NodeReady(n) {
				return fmt.Errorf("node not Ready: %+v", n.Status.Conditions)
			}
			return nil
		})
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "on-hosted-metal"},
			Spec: corev1.PodSpec{NodeName: "hosted-metal", Containers: []corev1.Container{{
				Name: "app", Image: image.DemoServer.Ref(nodeReg),
			}}},
		}
		if _, err := tcs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 2*time.Minute, "the pod Running on the joined host", func() error {
			p, err := tcs.CoreV1().Pods("default").Get(t.Context(), pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return fmt.Errorf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
			}
			if !strings.HasPrefix(p.Status.PodIP, "10.200.") {
				t.Errorf("pod IP %s is not in hosted-a's pod range %s", p.Status.PodIP, podCIDRs["hosted-a"])
			}
			return nil
		})
		// metrics-server, in its pod in the management cluster, scrapes
		// the joined host's kubelet: `kubectl top node` answers.
		mc := metricsclient.NewForConfigOrDie(cfgs["hosted-a"])
		testenv.Eventually(t, 2*time.Minute, "resource metrics of the joined host", func() error {
			m, err := mc.MetricsV1beta1().NodeMetricses().Get(t.Context(), "hosted-metal", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if m.Usage.Memory().IsZero() {
				return fmt.Errorf("no memory usage in %+v", m.Usage)
			}
			return nil
		})
	})
	t.Run("deleting a cluster removes everything it owned", func(t *testing.T) {
		for name := range clusters {
			if err := c.Delete(t.Context(), &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
		for name := range clusters {
			testenv.Eventually(t, 4*time.Minute, name+" and its namespace gone", func() error {
				if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &fkev1.Cluster{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("cluster still there (%v)", err)
				}
				if err := c.Get(t.Context(), client.ObjectKey{Name: hosted.Namespace("default/" + name)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("namespace still there (%v)", err)
				}
				for _, s := range []string{fkev1.KubeconfigSecretName(name), fkev1.PKISecretName(name)} {
					if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: s}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
						return fmt.Errorf("secret %s still there (%v)", s, err)
					}
				}
				return nil
			})
		}
	})
}

// testHostedUpgrade upgrades hosted cluster name from versions.Previous to
// versions.Default as a user does (fke cluster upgrade), probing its API
// all along: the snapshot is taken first, each Deployment rolls to the new
// version's image, a new API server replica serving before an old one
// stops, and the API reports the new version.
func testHostedUpgrade(t *testing.T, e *testenv.Env, c client.Client, mgmtKubeconfig, name string, cfg *rest.Config) {
	old, cur := versions.Previous, versions.Default
	tcs := kubernetes.NewForConfigOrDie(cfg)
	if v, err := tcs.Discovery().ServerVersion(); err != nil || v.GitVersion != old {
		t.Fatalf("%s reports %v (%v), want %s", name, v, err, old)
	}
	probe, err := testenv.ProbeAPI(cfg, "/api/v1/namespaces/default", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Not the CLI's own wait: under load the rollouts outlast the test
	// environment's limit on one command.
	e.MustRun("--kubeconfig", mgmtKubeconfig, "cluster", "upgrade", name, "--version", cur, "--no-wait")
	key := client.ObjectKey{Namespace: "default", Name: name}
	testenv.Eventually(t, 10*time.Minute, name+" upgraded", func() error {
		cl := &fkev1.Cluster{}
		if err := c.Get(t.Context(), key, cl); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionUpgrading)
		if up := cl.Status.Upgrade; up == nil || up.CompletionTime == nil || cond == nil || cond.Reason != fkev1.ReasonUpgraded {
			return fmt.Errorf("upgrade %+v, condition %+v", cl.Status.Upgrade, cond)
		}
		return nil
	})
	took := time.Since(start)
	gap, summary := probe.Stop()
	t.Logf("FIGURE hosted cluster %s upgraded %s -> %s: %s; API probe every 100 ms: %s", name, old, cur, took.Round(100*time.Millisecond), summary)
	if gap > 5*time.Second {
		t.Errorf("%s went unanswered for %s during its upgrade (%s)", name, gap, summary)
	}
	if v, err := tcs.Discovery().ServerVersion(); err != nil || v.GitVersion != cur {
		t.Errorf("%s reports %v (%v) after the upgrade, want %s", name, v, err, cur)
	}
	cl := &fkev1.Cluster{}
	if err := c.Get(t.Context(), key, cl); err != nil {
		t.Fatal(err)
	}
	if cl.Status.Upgrade.Snapshot == "" || cl.Status.Upgrade.From != old {
		t.Errorf("status.upgrade %+v: want the snapshot taken first, from %s", cl.Status.Upgrade, old)
	}
	for _, comp := range cl.Status.ControlPlane {
		if comp.Name != "etcd" && comp.Version != cur {
			t.Errorf("%s of %s runs %q, want %s", comp.Name, name, comp.Version, cur)
		}
	}
	ns := hosted.Namespace("default/" + name)
	var deps appsv1.DeploymentList
	if err := c.List(t.Context(), &deps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+cur) {
			t.Errorf("Deployment %s/%s runs %s, want the %s image", ns, d.Name, img, cur)
		}
	}
}

// testHostedAddons: the addons of hosted cluster name become Ready, each a
// Deployment in the cluster's namespace of the management cluster behind a
// Service; their APIs are Available through the tenant's API server, which
// calls the VPA's webhook with its client certificate; turning the GPU
// metrics adapter off removes its objects on both sides.
func testHostedAddons(t *testing.T, c client.Client, name string, cfg *rest.Config) {
	ns := hosted.Namespace("default/" + name)
	testenv.Eventually(t, 4*time.Minute, name+" AddonsReady", func() error {
		cl := &fkev1.Cluster{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionAddonsReady) {
			return fmt.Errorf("%+v", meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionAddonsReady))
		}
		return nil
	})
	for _, addon := range []string{addons.MetricsServerName, addons.GPUMetricsName, addons.VPAName} {
		d := &appsv1.Deployment{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: addon}, d); err != nil {
			t.Errorf("addon %s: %v", addon, err)
			continue
		}
		if d.Status.AvailableReplicas != 1 || d.Labels[hosted.LabelAddon] != addon {
			t.Errorf("addon %s: %d available, labels %v", addon, d.Status.AvailableReplicas, d.Labels)
		}
	}
	ag := aggregator.NewForConfigOrDie(cfg)
	for _, api := range []string{addons.MetricsAPIService, addons.CustomMetricsAPIService} {
		a, err := ag.ApiregistrationV1().APIServices().Get(t.Context(), api, metav1.GetOptions{})
		if err != nil {
			t.Errorf("APIService %s: %v", api, err)
			continue
		}
		if !apiServiceAvailable(a) {
			t.Errorf("APIService %s not Available: %+v", api, a.Status.Conditions)
		}
	}
	// `kubectl top pods` answers through the aggregation layer (no pods
	// run yet on this cluster's nodes: an empty list, not an error).
	if _, err := metricsclient.NewForConfigOrDie(cfg).MetricsV1beta1().PodMetricses("kube-system").List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("pod metrics: %v", err)
	}

	// The webhook's failure policy is Ignore: had the API server not
	// reached it, or not presented its client certificate, the object
	// would be admitted.
	inverted := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
		"metadata": map[string]any{"name": "inverted"},
		"spec": map[string]any{
			"targetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
			"resourcePolicy": map[string]any{"containerPolicies": []any{map[string]any{
				"containerName": "*", "minAllowed": map[string]any{"cpu": "2"}, "maxAllowed": map[string]any{"cpu": "1"},
			}}},
		},
	}}
	vpas := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1", Resource: "verticalpodautoscalers"})
	if _, err := vpas.Namespace("default").Create(t.Context(), inverted, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "max resource for cpu is lower than min") {
		t.Errorf("a VPA with minAllowed above maxAllowed: %v, want the webhook's refusal", err)
	}

	cl := &fkev1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Addons.GPUMetrics.Enabled = ptr.To(false)
	if err := c.Patch(t.Context(), cl, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the GPU metrics adapter removed", func() error {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &corev1.Secret{}} {
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: addons.GPUMetricsName}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s/%s still there (%v)", o, ns, addons.GPUMetricsName, err)
			}
		}
		if _, err := ag.ApiregistrationV1().APIServices().Get(t.Context(), addons.CustomMetricsAPIService, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("APIService %s still there (%v)", addons.CustomMetricsAPIService, err)
		}
		return nil
	})
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: addons.MetricsServerName}, &appsv1.Deployment{}); err != nil {
		t.Errorf("metrics-server went with the adapter: %v", err)
	}
}

func apiServiceAvailable(a *apiregv1.APIService) bool {
	for _, c := range a.Status.Conditions {
		if c.Type == apiregv1.Available {
			return c.Status == apiregv1.ConditionTrue
		}
	}
	return false
}
