package bench

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/image"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodetemplate"
	"fke.dev/fke/test/testenv"
)

// BenchmarkLocalGPUNode measures a real (local) GPU node with simulated
// H100s, through the real kubelet: pool create → 8 GPUs allocatable on the
// Node; a 1-GPU pod create → Running (image already on the node); an XID
// injected into the agent's simulated GPU → the Node's allocatable lowered.
//
//	go test ./bench -run '^$' -bench LocalGPUNode -benchtime 1x -v
func BenchmarkLocalGPUNode(b *testing.B) {
	checks := localnodes.Checks(context.Background(), binaries.Finder{Dir: testenv.BinDir(b)}, hostnet.New(nil, nil))
	if err := localnodes.Unavailable(checks); err != nil {
		b.Skipf("local nodes cannot run here: %v", err)
	}
	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		b.Skip("this host has NVIDIA GPUs; this benchmark measures the simulated machine")
	}
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "bench", "--wait")
	registry := e.WaitSystemImages()
	cs := e.Tenant("bench")
	var ready, running, xid []time.Duration
	for i := 0; i < b.N; i++ {
		pool := fmt.Sprintf("h100-%d", i)
		start := time.Now()
		e.MustRun("nodepool", "create", "bench/"+pool, "--provider", "local", "--instance-type", "gpu-h100x8", "--replicas", "1")
		node := waitAllocatable(b, cs, pool, 8)
		ready = append(ready, time.Since(start))

		// The first pod pulls the image; the measured ones find it there.
		for j := 0; j < 4; j++ {
			start := time.Now()
			name := fmt.Sprintf("%s-pod-%d", pool, j)
			benchGPUPod(b, cs, name, node, image.DemoServer.Ref(registry))
			if j > 0 {
				running = append(running, time.Since(start))
			}
		}

		agent := benchAgentIP(b, cs, node)
		for _, index := range []string{"7", "6", "5"} { // GPUs no pod uses
			start := time.Now()
			before := allocatable(b, cs, node)
			resp, err := http.Post(fmt.Sprintf("http://%s:9400/mock/xid?uuid=%s&xid=79", agent, gpuUUID(b, node, index)), "", nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("injecting an XID: %v %v", resp, err)
			}
			resp.Body.Close()
			testenv.Eventually(b, 30*time.Second, "allocatable lowered", func() error {
				if got := allocatable(b, cs, node); got != before-1 {
					return fmt.Errorf("%d allocatable", got)
				}
				return nil
			})
			xid = append(xid, time.Since(start))
		}
	}
	report := func(name, unit string, ds []time.Duration) {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		b.ReportMetric(ds[len(ds)/2].Seconds(), unit)
		b.Logf("%s: median %s, all %v", name, ds[len(ds)/2].Round(time.Millisecond), ds)
	}
	report("pool create → 8 GPUs allocatable", "s-gpus-allocatable", ready)
	report("GPU pod create → Running", "s-pod-running", running)
	report("XID → allocatable lowered", "s-xid-lowered", xid)
}

func waitAllocatable(b *testing.B, cs kubernetes.Interface, pool string, want int64) string {
	var node string
	testenv.Eventually(b, 3*time.Minute, "GPUs allocatable", func() error {
		list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: fkev1.LabelNodePool + "=" + pool})
		if err != nil || len(list.Items) != 1 {
			return fmt.Errorf("nodes: %v", err)
		}
		node = list.Items[0].Name
		if q := list.Items[0].Status.Allocatable[nodetemplate.ResourceGPU]; q.Value() != want {
			return fmt.Errorf("%s allocatable", q.String())
		}
		return nil
	})
	return node
}

func allocatable(b *testing.B, cs kubernetes.Interface, node string) int64 {
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	q := n.Status.Allocatable[nodetemplate.ResourceGPU]
	return q.Value()
}

func benchGPUPod(b *testing.B, cs kubernetes.Interface, name, node, img string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{Name: "app", Image: img,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{nodetemplate.ResourceGPU: resource.MustParse("1")}}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, 2*time.Minute, "pod "+name+" running", func() error {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%v %v", p.Status.Phase, err)
		}
		return nil
	})
}

func benchAgentIP(b *testing.B, cs kubernetes.Interface, node string) string {
	var ip string
	testenv.Eventually(b, time.Minute, "GPU agent running", func() error {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(context.Background(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=" + addons.GPUAgentName, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				ip = p.Status.PodIP
				return nil
			}
		}
		return fmt.Errorf("no running agent")
	})
	return ip
}

// gpuUUID returns the UUID of GPU index of node's simulated machine.
func gpuUUID(b *testing.B, node, index string) string {
	out, err := exec.Command(testenv.BinDir(b)+"/fke-gpu-agent", "info", "--backend", "mock:dgxh100", "--node-name", node).Output()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == index {
			return f[1]
		}
	}
	b.Fatalf("no GPU %s in:\n%s", index, out)
	return ""
}
