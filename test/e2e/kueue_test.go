package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/test/testenv"
)

// kueueMetricsCertDir is where Kueue v0.17 loads its metrics serving
// certificate from when it does not manage certificates itself; the path is
// fixed in its cmd/kueue/main.go.
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// kueueObjects is what a Kueue user applies for gang scale-up through
// ProvisioningRequests: a flavor, a ProvisioningRequest admission check of
// class best-effort-atomic-scale-up, a ClusterQueue of 16 GPUs that requires
// the check, and a LocalQueue in "default".
const kueueObjects = `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ProvisioningRequestConfig
metadata: {name: gang}
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  managedResources: [nvidia.com/gpu]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: gang}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: gang}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpus}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 16}
  admissionChecksStrategy:
    admissionChecks: [{name: gang}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: default}
spec: {clusterQueue: gpus}
`

// TestKueueProvisioningRequestGPUJob runs Kueue v0.17 itself against a
// tenant whose GPU pool (tainted nvidia.com/gpu) starts empty: a suspended
// Job of 2 pods × 8 GPUs, written as users write GPU pods (no toleration),
// is admitted through the ProvisioningRequest admission check, the pool
// grows by exactly the 2 nodes at once, and the Job's pods run there.
func TestKueueProvisioningRequestGPUJob(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	kueueBin := kueueBinary(t)
	crdDir := kueueCRDDir(t)
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "demo", "--wait", "--nodepool", "name=gpu,type=gpu-h100x8,min=0,max=4")
	cs := e.Tenant("demo")
	cfg := e.TenantConfig("demo")

	installKueueCRDs(t, cfg, crdDir)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(e.MustRun("kubeconfig", "demo")), 0o600); err != nil {
		t.Fatal(err)
	}
	startKueue(t, kueueBin, kubeconfig)

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applyKueueObjects(t, dyn, kueueObjects)
	testenv.Eventually(t, 60*time.Second, "ClusterQueue gpus active", func() error {
		return conditionTrue(dyn, kueueGVR("clusterqueues"), "", "gpus", "Active")
	})

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", Labels: map[string]string{"kueue.x-k8s.io/queue-name": "team"}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](2),
			Completions: ptr.To[int32](2),
			Suspend:     ptr.To(true),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "train"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "main", Image: "registry.local/train:1",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
					}},
				},
			},
		},
	}
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()

	// Kueue asks fke for the 2 nodes atomically; fke must provision them,
	// not answer "untolerated taint" for the toleration-less template.
	testenv.Eventually(t, 120*time.Second, "the Job admitted", func() error {
		if err := workloadAdmitted(dyn); err != nil {
			return fmt.Errorf("%w; provisioning requests: %s", err, provisioningRequests(dyn))
		}
		return nil
	})
	admitted := time.Since(created)
	testenv.Eventually(t, 60*time.Second, "the Job unsuspended with 2 pods bound", func() error {
		j, err := cs.BatchV1().Jobs("default").Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ptr.Deref(j.Spec.Suspend, true) {
			return errors.New("still suspended")
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=train"})
		if err != nil {
			return err
		}
		started := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded) {
				started++
			}
		}
		if started != 2 {
			return fmt.Errorf("%d of 2 pods started", started)
		}
		return nil
	})
	nodes := map[string]bool{}
	for _, n := range poolNodes(t, cs, "gpu") {
		nodes[n.Name] = true
	}
	if len(nodes) != 2 {
		t.Fatalf("GPU pool has %d nodes, want the 2 provisioned for the Job", len(nodes))
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=train"})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range pods.Items {
		if !nodes[p.Spec.NodeName] {
			t.Errorf("pod %s runs on %q, not on a node of the GPU pool %v", p.Name, p.Spec.NodeName, nodes)
		}
		used[p.Spec.NodeName] = true
	}
	if len(used) != 2 {
		t.Errorf("the Job's pods share %d nodes, want one 8-GPU node each", len(used))
	}
	t.Logf("Job admitted %.1fs after it was created; its pods run on %v", admitted.Seconds(), sortedKeys(used))
}

// kueueBinary returns the kueue binary built by hack/k8s/build.sh, or skips
// the test when it is not built (and fails it under CI, where it must be).
func kueueBinary(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, dir := range []string{os.Getenv(binaries.EnvDir), filepath.Join(testenv.RepoRoot(), "_output", "bin")} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "kueue")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
		tried = append(tried, p)
	}
	msg := fmt.Sprintf("kueue is not built (looked for %s); build it with `hack/k8s/build.sh _output/bin kueue` (part of `make binaries`, ~6 min)", strings.Join(tried, ", "))
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// kueueCRDDir returns the directory of Kueue's CRDs in the module cache, for
// the version hack/k8s/kueue pins (downloaded when missing).
func kueueCRDDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kueue")
	cmd.Dir = filepath.Join(testenv.RepoRoot(), "hack", "k8s", "kueue")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locating Kueue's module (its CRDs): %v\n%s", err, out)
	}
	var mod struct{ Dir string }
	if err := yaml.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("locating Kueue's module: no directory in %s (%v)", out, err)
	}
	return filepath.Join(mod.Dir, "config", "components", "crd", "bases")
}

// installKueueCRDs creates Kueue's CRDs (as released, without conversion
// webhooks) in the tenant and waits until they are established.
func installKueueCRDs(t *testing.T, cfg *rest.Config, dir string) {
	t.Helper()
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kueue CRDs in %s: %v", dir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = addons.EnsureCRD(ctx, cs, crd)
		cancel()
		if err != nil {
			t.Fatalf("installing %s: %v", filepath.Base(f), err)
		}
	}
}

// startKueue runs Kueue out of cluster against the tenant: its webhooks
// are served on loopback but registered nowhere, it manages no
// certificates, the on-demand visibility server is off, and it only
// integrates batch/v1 Jobs. It is stopped when the test ends.
func startKueue(t *testing.T, bin, kubeconfig string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("kueue-test-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(pki.CertSpec{CommonName: "kueue", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usages: pki.UsageServer})
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	writeKeyPair(t, certDir, serving)
	ensureKueueMetricsCert(t, serving)

	ports, err := supervisor.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	health := fmt.Sprintf("127.0.0.1:%d", ports[1])
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health: {healthProbeBindAddress: "%s"}
metrics: {bindAddress: "0"}
webhook: {host: 127.0.0.1, port: %d, certDir: %s}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
integrations: {frameworks: [batch/job]}
`, health, ports[0], certDir)
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kueue.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config="+configPath, "--feature-gates=VisibilityOnDemand=false")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kueue: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the process this test started, by its handle
		<-exited
		logFile.Close()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil {
				t.Logf("kueue log (last 8 KiB):\n%s", tail(data, 8<<10))
			}
		}
	})
	testenv.Eventually(t, 60*time.Second, "kueue ready", func() error {
		select {
		case err := <-exited:
			exited <- err
			data, _ := os.ReadFile(logPath)
			t.Fatalf("kueue exited: %v\n%s", err, tail(data, 8<<10))
		default:
		}
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}

// ensureKueueMetricsCert writes kp into Kueue's fixed metrics certificate
// directory unless a certificate is there already, and removes what it
// wrote when the test ends.
func ensureKueueMetricsCert(t *testing.T, kp *pki.KeyPair) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(kueueMetricsCertDir, "tls.crt")); err == nil {
		return
	}
	root := "/etc/kueue"
	_, err := os.Stat(root)
	createdRoot := errors.Is(err, fs.ErrNotExist)
	writeKeyPair(t, kueueMetricsCertDir, kp)
	t.Cleanup(func() {
		if createdRoot {
			os.RemoveAll(root)
			return
		}
		os.Remove(filepath.Join(kueueMetricsCertDir, "tls.crt"))
		os.Remove(filepath.Join(kueueMetricsCertDir, "tls.key"))
	})
}

func writeKeyPair(t *testing.T, dir string, kp *pki.KeyPair) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), kp.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), kp.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// applyKueueObjects creates the objects of a multi-document YAML.
func applyKueueObjects(t *testing.T, dyn dynamic.Interface, docs string) {
	t.Helper()
	for _, doc := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			t.Fatalf("parsing %q: %v", doc, err)
		}
		gvk := obj.GroupVersionKind()
		gvr := kueueGVR(strings.ToLower(gvk.Kind) + "s")
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		testenv.Eventually(t, 30*time.Second, "creating "+gvk.Kind+" "+obj.GetName(), func() error {
			_, err := ri.Create(context.Background(), obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}
}

func kueueGVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: resource}
}

// conditionTrue is nil when the object's status condition typ is True.
func conditionTrue(dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name, typ string) error {
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns != "" {
		ri = dyn.Resource(gvr).Namespace(ns)
	}
	obj, err := ri.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return statusCondition(obj, typ)
}

func statusCondition(obj *unstructured.Unstructured, typ string) error {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			if m["status"] == "True" {
				return nil
			}
			return fmt.Errorf("%s %s: %s=%v (%v: %v)", obj.GetKind(), obj.GetName(), typ, m["status"], m["reason"], m["message"])
		}
	}
	return fmt.Errorf("%s %s: no %s condition yet", obj.GetKind(), obj.GetName(), typ)
}

// workloadAdmitted is nil when the Job's Workload is Admitted.
func workloadAdmitted(dyn dynamic.Interface) error {
	list, err := dyn.Resource(kueueGVR("workloads")).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return errors.New("no Workload yet")
	}
	return statusCondition(&list.Items[0], "Admitted")
}

// provisioningRequests summarises the ProvisioningRequests' conditions.
func provisioningRequests(dyn dynamic.Interface) string {
	gvr := schema.GroupVersionResource{Group: "autoscaling.x-k8s.io", Version: "v1", Resource: "provisioningrequests"}
	list, err := dyn.Resource(gvr).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	for _, pr := range list.Items {
		conds, _, _ := unstructured.NestedSlice(pr.Object, "status", "conditions")
		fmt.Fprintf(&b, "%s:", pr.GetName())
		for _, c := range conds {
			m, _ := c.(map[string]any)
			fmt.Fprintf(&b, " %v=%v/%v %q", m["type"], m["status"], m["reason"], m["message"])
		}
		b.WriteString("; ")
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

func tail(data []byte, n int) []byte {
	if len(data) > n {
		return data[len(data)-n:]
	}
	return data
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
