package kwok_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/test/testenv"
)

const gpuProduct = "NVIDIA-H100-80GB-HBM3"

var h100x8 = &fkev1.InstanceType{
	ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100x8"},
	Spec: fkev1.InstanceTypeSpec{
		CPU:    resource.MustParse("96"),
		Memory: resource.MustParse("1Ti"),
		GPU: &fkev1.InstanceGPU{
			Count: 8, Product: gpuProduct, MemoryMiB: 81559,
			Family: "hopper", ComputeCapability: "9.0",
		},
	},
}

// tenant is a tenant cluster "demo" of a fresh management plane, with a
// kwok provider whose processes stop when the test ends.
type tenant struct {
	cluster  nodeprovider.Cluster
	client   kubernetes.Interface
	provider *kwok.Provider
	dataDir  string
}

func upTenant(t *testing.T) tenant {
	t.Helper()
	return upTenantWith(t, nil)
}

// upTenantWith is upTenant with the provider's options changed by opts.
func upTenantWith(t *testing.T, opts func(*kwok.Options)) tenant {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a management plane and a tenant cluster")
	}
	e := testenv.Up(t)
	if _, err := (binaries.Finder{Dir: e.BinDir}).Path(binaries.Kwok); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kwok missing under CI: %v", err)
		}
		t.Skipf("kwok not built (run `make binaries`): %v", err)
	}
	e.MustRun("cluster", "create", "demo", "--wait")
	cluster := nodeprovider.Cluster{Key: "default/demo", Name: "demo", Config: e.TenantConfig("demo"), PodCIDR: "10.244.0.0/16"}
	dataDir := t.TempDir()
	o := kwok.Options{
		DataDir:  dataDir,
		Binaries: binaries.Finder{Dir: e.BinDir},
		Logger:   slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if opts != nil {
		opts(&o)
	}
	p := kwok.New(o)
	// Registered after testenv.Up's cleanup, so it runs before `fke down`.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.StopAll(ctx); err != nil {
			t.Errorf("stopping kwok: %v", err)
		}
	})
	return tenant{cluster: cluster, client: e.Tenant("demo"), provider: p, dataDir: dataDir}
}

func gpuNodeSpec(clusterName, machine string) nodeprovider.NodeSpec {
	pool := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "demo.gpu", Namespace: "default"},
		Spec:       fkev1.NodePoolSpec{ClusterName: clusterName, PoolName: "gpu", InstanceType: h100x8.Name},
	}
	return nodeprovider.NodeSpec{
		MachineName:  machine,
		InstanceType: h100x8,
		Template:     nodetemplate.Build(pool, h100x8, clusterName+"-"+machine),
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func gpuPod(name string, gpus int64) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "cuda",
				Image:     "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodetemplate.ResourceGPU: q}},
			}},
		},
	}
}

func TestProviderAgainstTenantCluster(t *testing.T) {
	tc := upTenant(t)
	ctx := t.Context()
	p, cluster, client := tc.provider, tc.cluster, tc.client

	// Two GPU nodes; Create is idempotent.
	var instances []nodeprovider.Instance
	for _, machine := range []string{"gpu-0", "gpu-1"} {
		in, err := p.Create(ctx, cluster, gpuNodeSpec(cluster.Name, machine))
		if err != nil {
			t.Fatalf("Create %s: %v", machine, err)
		}
		want := nodeprovider.Instance{ProviderID: "kwok://demo/demo-" + machine, NodeName: "demo-" + machine, MachineName: machine, State: nodeprovider.InstanceRunning}
		if in != want {
			t.Fatalf("Create %s = %+v, want %+v", machine, in, want)
		}
		instances = append(instances, in)
	}
	if again, err := p.Create(ctx, cluster, gpuNodeSpec(cluster.Name, "gpu-0")); err != nil || again != instances[0] {
		t.Fatalf("second Create = %+v, %v; want %+v", again, err, instances[0])
	}
	taken := gpuNodeSpec(cluster.Name, "gpu-0")
	taken.MachineName = "other"
	if _, err := p.Create(ctx, cluster, taken); err == nil {
		t.Fatal("Create of another machine's node succeeded")
	}
	if list, err := p.List(ctx, cluster); err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v; want two instances", list, err)
	}
	if got, err := p.Get(ctx, cluster, instances[1].ProviderID); err != nil || got != instances[1] {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, instances[1])
	}

	testenv.Eventually(t, 30*time.Second, "both nodes Ready with 8 GPUs and GFD labels", func() error {
		for _, in := range instances {
			n, err := client.CoreV1().Nodes().Get(ctx, in.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(n) {
				return fmt.Errorf("node %s not Ready: %v", n.Name, n.Status.Conditions)
			}
			if q := n.Status.Allocatable[nodetemplate.ResourceGPU]; q.Value() != 8 {
				return fmt.Errorf("node %s allocatable %s = %s, want 8", n.Name, nodetemplate.ResourceGPU, q.String())
			}
			if n.Labels[nodetemplate.LabelGPUProduct] != gpuProduct || n.Labels[nodetemplate.LabelGPUCount] != "8" {
				return fmt.Errorf("node %s lacks GFD labels: %v", n.Name, n.Labels)
			}
		}
		return nil
	})

	// A pod of 4 GPUs runs; the tenant API server adds its toleration of the GPU taint.
	testenv.Eventually(t, 30*time.Second, "pod gpu4 created", func() error {
		_, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("gpu4", 4), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err // the default service account may not exist yet
	})
	testenv.Eventually(t, 30*time.Second, "pod gpu4 Running on a kwok node", func() error {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "gpu4", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !strings.HasPrefix(pod.Spec.NodeName, "demo-gpu-") || pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod on node %q in phase %s", pod.Spec.NodeName, pod.Status.Phase)
		}
		return nil
	})

	// A pod of 9 GPUs fits no node.
	if _, err := client.CoreV1().Pods("default").Create(ctx, gpuPod("gpu9", 9), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "pod gpu9 unschedulable for lack of GPUs", func() error {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "gpu9", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
			return fmt.Errorf("pod on node %q in phase %s, want Pending", pod.Spec.NodeName, pod.Status.Phase)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "Insufficient nvidia.com/gpu") {
				return nil
			}
		}
		return fmt.Errorf("no PodScheduled=False condition naming Insufficient nvidia.com/gpu: %v", pod.Status.Conditions)
	})

	// Delete removes the Node; a second Delete and a Get are NotFound.
	if err := p.Delete(ctx, cluster, instances[1].ProviderID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "node demo-gpu-1 gone", func() error {
		_, err := client.CoreV1().Nodes().Get(ctx, instances[1].NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("node still there: %v", err)
	})
	if err := p.Delete(ctx, cluster, instances[1].ProviderID); !nodeprovider.IsNotFound(err) {
		t.Errorf("second Delete: %v, want NotFound", err)
	}
	if _, err := p.Get(ctx, cluster, instances[1].ProviderID); !nodeprovider.IsNotFound(err) {
		t.Errorf("Get after Delete: %v, want NotFound", err)
	}
	if _, err := p.Get(ctx, cluster, "kwok://other/demo-gpu-0"); !nodeprovider.IsNotFound(err) {
		t.Errorf("Get of another cluster's ID: %v, want NotFound", err)
	}

	// Release stops kwok.
	pid := p.Pid(cluster.Key)
	if pid == 0 || !testenv.Alive(pid) {
		t.Fatalf("kwok pid %d not running before Release", pid)
	}
	if err := p.Release(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "kwok process gone", func() error {
		if testenv.Alive(pid) {
			return errors.New("kwok still runs")
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(tc.dataDir, "default", "demo", "kwok")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("kwok files left after Release: %v", err)
	}
	if err := p.Release(ctx, cluster); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}
