package localnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/config/crd"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/internal/release"
	"fke.dev/fke/test/testenv"
)

const (
	helmNamespace = "fke-system"
	helmRelease   = "fke"
	// managerName is the chart's Deployment: the release name, which holds
	// the chart's name.
	managerName = "fke"
)

// TestHelmChart: fke hosting fke, from a release. A release of fke is laid
// out from the binaries already built (`make release`'s layout, no second
// build) and unpacked as a user would; fke runs from the unpacked tarball.
// A cluster with one local CPU node is the management cluster; the
// release's images go to fke's registry (`fke image push` of its OCI
// layout), and the release's packaged chart is installed and upgraded
// there with Helm's SDK, as `helm install` and `helm upgrade` do, naming
// no image: the chart's default, the manager's image at the release's
// version. The manager runs with the kwok provider and first no
// control-plane runtime (the local runtime runs tenant control planes as
// processes beside the manager, which its image does not hold), then the
// hosted one with the release's control-plane images.
func TestHelmChart(t *testing.T) {
	requireNodeTools(t)
	rel := testenv.MakeRelease(t, "v0.99.0", map[string]string{"fke-manager": buildManager(t)})
	e := testenv.New(t)
	e.Fke, e.BinDir = filepath.Join(rel.Bin, "fke"), rel.Bin
	upForLocalNodesWith(t, e)
	t.Run("fke runs the release's binaries", func(t *testing.T) {
		out := e.For(t).MustRun("version")
		for _, c := range release.Upstream() {
			if !strings.Contains(out, filepath.Join(rel.Bin, c)) {
				t.Errorf("fke version does not name %s from the release:\n%s", c, out)
			}
		}
	})
	e.MustRun("cluster", "create", "mgmt", "--wait", "--metrics-server=false")
	e.WaitSystemImages()
	e.MustRun("nodepool", "create", "mgmt/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1")
	cs := e.Tenant("mgmt")
	waitReadyLocalNode(t, cs)

	start := time.Now()
	out := e.MustRun("image", "push", rel.Images)
	m := regexp.MustCompile(`pushed (\S+)/fke/manager:` + regexp.QuoteMeta(rel.Version) + ` `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pushing the release's images pushed no fke/manager:%s:\n%s", rel.Version, out)
	}
	nodeReg, err := nodejoin.NodeRegistry(m[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE push the release's images: %s", time.Since(start).Round(10*time.Millisecond))
	values := func(replicas int, memoryLimit string) map[string]any {
		return map[string]any{
			"image":     map[string]any{"registry": nodeReg},
			"providers": []any{"kwok"},
			"replicas":  replicas,
			"resources": map[string]any{"limits": map[string]any{"memory": memoryLimit}},
		}
	}
	hostedValues := func() map[string]any {
		v := values(2, "768Mi")
		v["runtimes"] = []any{"hosted"}
		// The release holds both versions' images: a hosted cluster
		// upgrades from the older.
		v["hosted"] = map[string]any{"registry": nodeReg + "/" + image.ControlPlaneRepository}
		return v
	}

	kubeconfig := filepath.Join(t.TempDir(), "mgmt.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(e.MustRun("kubeconfig", "mgmt")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, kubeconfig)
	ch, err := loader.Load(rel.Chart)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.AppVersion != rel.Version {
		t.Fatalf("the release's chart has appVersion %s, want %s", ch.Metadata.AppVersion, rel.Version)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpManager(t, cs)
		}
	})

	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = helmRelease, helmNamespace, true
	start = time.Now()
	if _, err := install.RunWithContext(t.Context(), ch, values(1, "1Gi")); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	first := managerRolledOut(t, cs, 1, "1Gi")[0]
	t.Logf("FIGURE helm install -> manager pod Ready: %s", time.Since(start).Round(10*time.Millisecond))
	leaderIs(t, cs, first.Name)
	t.Logf("FIGURE helm install -> manager holds the leader Lease: %s", time.Since(start).Round(10*time.Millisecond))

	t.Run("the chart's CRDs are established", func(t *testing.T) {
		e := e.For(t)
		crds, err := crd.All()
		if err != nil {
			t.Fatal(err)
		}
		ax, err := apiextclient.NewForConfig(e.TenantConfig("mgmt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range crds {
			got, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), want.Name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("CRD %s: %v", want.Name, err)
				continue
			}
			if !crdEstablished(got) {
				t.Errorf("CRD %s is not established: %+v", want.Name, got.Status.Conditions)
			}
		}
	})
	t.Run("the manager reconciles a NodePool with the chart's RBAC", func(t *testing.T) {
		e := e.For(t)
		reconcilePool(t, e)
	})
	t.Run("the metrics Service serves the leader's metrics", func(t *testing.T) {
		metricsOf(t, cs, first)
	})
	t.Run("the manager runs without being refused anything", func(t *testing.T) {
		logs, err := cs.CoreV1().Pods(helmNamespace).GetLogs(first.Name, &corev1.PodLogOptions{}).DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		lower := strings.ToLower(string(logs))
		if strings.Contains(lower, "forbidden") {
			t.Errorf("the manager was refused an API call:\n%s", logs)
		}
		if !strings.Contains(lower, "successfully acquired lease") {
			t.Errorf("no leader election in the logs:\n%s", logs)
		}
	})

	// helm upgrade with another memory limit rolls the Deployment: a new
	// pod with the new limit, the old one gone, and the Lease handed over.
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = helmNamespace
	start = time.Now()
	if _, err := upgrade.RunWithContext(t.Context(), helmRelease, ch, values(1, "768Mi")); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	second := managerRolledOut(t, cs, 1, "768Mi")[0]
	if second.Name == first.Name {
		t.Fatalf("helm upgrade left pod %s in place", first.Name)
	}
	t.Logf("FIGURE helm upgrade -> new manager pod Ready, old one gone: %s", time.Since(start).Round(10*time.Millisecond))
	leaderIs(t, cs, second.Name)
	t.Logf("FIGURE helm upgrade -> new pod holds the leader Lease: %s", time.Since(start).Round(10*time.Millisecond))

	// Two replicas: one leads, the other waits. Deleting the leader's pod
	// hands the Lease on at once (the leader gives it back as it stops) to
	// the other replica or to the pod that replaces the deleted one,
	// whichever asks first; a PodDisruptionBudget keeps one running through
	// drains.
	if _, err := upgrade.RunWithContext(t.Context(), helmRelease, ch, values(2, "768Mi")); err != nil {
		t.Fatalf("helm upgrade to two replicas: %v", err)
	}
	managerRolledOut(t, cs, 2, "768Mi")
	if _, err := cs.PolicyV1().PodDisruptionBudgets(helmNamespace).Get(t.Context(), managerName, metav1.GetOptions{}); err != nil {
		t.Errorf("no PodDisruptionBudget with two replicas: %v", err)
	}
	leader := leaderPod(t, cs, "")
	start = time.Now()
	if err := cs.CoreV1().Pods(helmNamespace).Delete(t.Context(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := leaderPod(t, cs, leader)
	t.Logf("FIGURE leader pod deleted -> %s holds the Lease: %s", next, time.Since(start).Round(10*time.Millisecond))

	// The hosted runtime: tenant control planes as Deployments of this
	// cluster, made by the manager in its pod.
	if _, err := upgrade.RunWithContext(t.Context(), helmRelease, ch, hostedValues()); err != nil {
		t.Fatalf("helm upgrade to the hosted runtime: %v", err)
	}
	managerRolledOut(t, cs, 2, "768Mi")
	testHostedClusters(t, e, cs, kubeconfig)
}

// metricsOf checks that the metrics Service has pod among its ready
// endpoints, and that the pod's metrics (read at its address, which the
// host reaches) report it the leader.
func metricsOf(t *testing.T, cs kubernetes.Interface, pod corev1.Pod) {
	t.Helper()
	svc := managerName + "-metrics"
	var port int32
	testenv.Eventually(t, 30*time.Second, "the metrics Service's endpoint "+pod.Status.PodIP, func() error {
		list, err := cs.DiscoveryV1().EndpointSlices(helmNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return err
		}
		for _, sl := range list.Items {
			for _, ep := range sl.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, false) && slices.Contains(ep.Addresses, pod.Status.PodIP) && len(sl.Ports) == 1 {
					port = ptr.Deref(sl.Ports[0].Port, 0)
					return nil
				}
			}
		}
		return fmt.Errorf("no ready endpoint %s in %d slices", pod.Status.PodIP, len(list.Items))
	})
	body := httpGet(t, fmt.Sprintf("http://%s/metrics", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))))
	if want := `leader_election_master_status{name="` + manager.LeaderElectionID + `"} 1`; !strings.Contains(body, want) {
		t.Errorf("metrics of %s lack %q", pod.Name, want)
	}
}

// leaderPod waits until a running manager pod other than not holds the
// leader Lease, and returns its name.
func leaderPod(t *testing.T, cs kubernetes.Interface, not string) string {
	t.Helper()
	var name string
	testenv.Eventually(t, 2*time.Minute, "a manager pod other than "+not+" holds the leader Lease", func() error {
		l, err := cs.CoordinationV1().Leases(helmNamespace).Get(t.Context(), manager.LeaderElectionID, metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		pod, _, ok := strings.Cut(holder, "_")
		if !ok || pod == not {
			return fmt.Errorf("lease held by %q", holder)
		}
		p, err := cs.CoreV1().Pods(helmNamespace).Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("lease held by %q: %w", holder, err)
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("lease held by %q, a pod in phase %s (deleted: %v)", holder, p.Status.Phase, p.DeletionTimestamp != nil)
		}
		name = pod
		return nil
	})
	return name
}

// reconcilePool creates a NodePool of a cluster that does not exist in the
// management cluster and waits until the manager in the pod has added its
// finalizer and reported the missing cluster in its status; then deletes it
// and waits until the manager has let it go. The manager's calls are made
// with the chart's ServiceAccount.
func reconcilePool(t *testing.T, e *testenv.Env) {
	scheme, err := manager.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.TenantConfig("mgmt"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	np := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fkev1.NodePoolObjectName("absent", "cpu")},
		Spec: fkev1.NodePoolSpec{ClusterName: "absent", PoolName: "cpu", InstanceType: "cpu-small",
			Provider: fkev1.ProviderKwok, Replicas: ptr.To[int32](1)},
	}
	if err := c.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the pool reports its missing cluster", func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(np), np); err != nil {
			return err
		}
		if !slices.Contains(np.Finalizers, fkev1.NodePoolFinalizer) {
			return fmt.Errorf("finalizers %v", np.Finalizers)
		}
		for _, cond := range np.Status.Conditions {
			if cond.Reason == fkev1.ReasonClusterNotReady && strings.Contains(cond.Message, "cluster absent does not exist") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", np.Status.Conditions)
	})
	if err := c.Delete(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the deleted pool gone", func() error {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(np), &fkev1.NodePool{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pool still there (%v)", err)
	})
}

// buildManager builds cmd/fke-manager into a temporary directory.
func buildManager(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-tags", testenv.BuildTags, "-o", dir+"/", "./cmd/fke-manager")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fke-manager: %v\n%s", err, out)
	}
	return filepath.Join(dir, "fke-manager")
}

// helmConfig is Helm's action configuration for the cluster of kubeconfig,
// releases stored in Secrets of helmNamespace (Helm's default driver).
func helmConfig(t *testing.T, kubeconfig string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	ns := helmNamespace
	flags.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, helmNamespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// managerRolledOut waits until the manager's Deployment has rolled out its
// latest spec (replicas pods, all Ready, with memoryLimit, no other pod
// left) and returns those pods.
func managerRolledOut(t *testing.T, cs kubernetes.Interface, replicas int32, memoryLimit string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	testenv.Eventually(t, 4*time.Minute, fmt.Sprintf("the manager rolled out: %d pods with memory limit %s", replicas, memoryLimit), func() error {
		d, err := cs.AppsV1().Deployments(helmNamespace).Get(t.Context(), managerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration != d.Generation || st.UpdatedReplicas != replicas || st.ReadyReplicas != replicas || st.Replicas != replicas {
			return fmt.Errorf("deployment status %+v", st)
		}
		list, err := cs.CoreV1().Pods(helmNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return err
		}
		if len(list.Items) != int(replicas) {
			return fmt.Errorf("%d manager pods", len(list.Items))
		}
		for _, pod := range list.Items {
			if got := pod.Spec.Containers[0].Resources.Limits.Memory().String(); got != memoryLimit {
				return fmt.Errorf("pod %s has memory limit %s", pod.Name, got)
			}
			if !podReady(&pod) {
				return fmt.Errorf("pod %s is not Ready: %+v", pod.Name, pod.Status.Conditions)
			}
		}
		pods = list.Items
		return nil
	})
	return pods
}

// leaderIs waits until pod holds the manager's leader-election Lease
// (controller-runtime's identity is the host name, the pod's name, and a
// unique suffix).
func leaderIs(t *testing.T, cs kubernetes.Interface, pod string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, pod+" holds the leader Lease", func() error {
		l, err := cs.CoordinationV1().Leases(helmNamespace).Get(t.Context(), manager.LeaderElectionID, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if holder := ptr.Deref(l.Spec.HolderIdentity, ""); !strings.HasPrefix(holder, pod+"_") {
			return fmt.Errorf("lease held by %q", holder)
		}
		return nil
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func crdEstablished(c *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == apiextensionsv1.Established {
			return cond.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// dumpManager logs the manager pods' state and logs.
func dumpManager(t *testing.T, cs kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(helmNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing manager pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: phase %s, conditions %+v, containers %+v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		logs, err := cs.CoreV1().Pods(helmNamespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		t.Logf("logs of %s (%v):\n%s", p.Name, err, logs)
	}
	evs, err := cs.CoreV1().Events(helmNamespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ev := range evs.Items {
			t.Logf("event %s %s: %s %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
}
