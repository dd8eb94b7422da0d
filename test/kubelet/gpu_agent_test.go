package kubelet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/deviceplugin"
	"fke.dev/fke/internal/gpu/health"
	gpumetrics "fke.dev/fke/internal/gpu/metrics"
	gpunode "fke.dev/fke/internal/gpu/node"
	"fke.dev/fke/internal/gpu/nvml"
	"fke.dev/fke/test/testenv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

const gpu = corev1.ResourceName(deviceplugin.GPUResource)

// Bounds from the issue and DESIGN.md's device-plugin targets.
const (
	restartBound = 2 * time.Second // kubelet restart visible → allocatable back to 8
	xidBound     = time.Second     // XID injected → allocatable 7
	pollEvery    = 10 * time.Millisecond
)

// TestGPUAgentWithRealKubelet runs the GPU agent's device plugin and health
// monitor (mock:dgxh100, 8 GPUs) against a real kubelet v1.37.2 with its own
// containerd, joined to a tenant cluster created with the fke CLI:
// registration, allocation of a 2-GPU pod, kubelet restart, an XID taking
// one GPU out and its recovery.
func TestGPUAgentWithRealKubelet(t *testing.T) {
	kubeletBin := requireNodeTools(t)

	// testenv builds fke into a temp dir that it never removes; this is the
	// package's only user of it, so remove it last (after `fke down`).
	fkeBin := testenv.FkeBinary(t)
	t.Cleanup(func() {
		dir := filepath.Dir(fkeBin)
		if !strings.HasPrefix(filepath.Base(dir), "fke-test-bin-") {
			return // not testenv's own temp dir
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing fke test binary: %v", err)
		}
	})
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "demo", "--wait")
	tenant := e.TenantConfig("demo")
	cs := e.Tenant("demo")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	nodeName := "gpu-kubelet-" + randomSuffix(t)
	n := newNode(t, kubeletBin, nodeName, tenant)
	n.StartContainerd(ctx)
	n.StartKubelet(ctx)
	testenv.Eventually(t, 60*time.Second, "node "+nodeName+" registered", func() error {
		_, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err
	})

	// 1. The agent registers; the Node shows 8 GPUs.
	a := startAgent(t, n, cs, nodeName)
	start := time.Now()
	testenv.Eventually(t, 30*time.Second, "node capacity and allocatable nvidia.com/gpu=8", func() error {
		return nodeGPUs(ctx, cs, nodeName, 8, true)
	})
	t.Logf("agent start → Node capacity and allocatable nvidia.com/gpu=8: %s (registrations: %d)", time.Since(start).Round(time.Millisecond), a.manager.Registrations(deviceplugin.GPUResource))
	if got := podResourcesAllocatable(ctx, n.PodResourcesSocket()); got != 8 {
		t.Fatalf("pod-resources GetAllocatableResources: %d GPUs, want 8", got)
	}

	// 2. A pod asking for 2 GPUs gets 2 distinct devices, seen through the
	// pod-resources API. The node is NotReady (no CNI): the pod is bound to
	// it directly and tolerates everything; the kubelet allocates devices
	// when it admits the pod, before any sandbox exists.
	podName := createGPUPod(t, ctx, cs, nodeName, 2)
	var held []string
	testenv.Eventually(t, 60*time.Second, "pod-resources shows 2 GPUs for "+podName, func() error {
		var err error
		held, err = podGPUs(ctx, n.PodResourcesSocket(), podName)
		if err != nil {
			return err
		}
		if len(held) != 2 {
			return fmt.Errorf("pod holds %v", held)
		}
		return nil
	})
	if held[0] == held[1] {
		t.Fatalf("pod holds the same GPU twice: %v", held)
	}
	for _, u := range held {
		if !slices.Contains(a.mock.UUIDs(), u) {
			t.Fatalf("pod holds %s, not a GPU of the mock (%v)", u, a.mock.UUIDs())
		}
	}
	t.Logf("pod %s holds %v", podName, held)

	// 3. Kubelet restart. While it is down the Node is set to 0 GPUs, so
	// that 8 again can only come from the new kubelet; the clock starts
	// when the new kubelet's registration socket appears.
	regs := a.manager.Registrations(deviceplugin.GPUResource)
	oldSock, err := os.Stat(n.RegistrationSocket())
	if err != nil {
		t.Fatal(err)
	}
	n.StopKubelet(ctx)
	setNodeGPUs(t, ctx, cs, nodeName, 0)
	sockSeen := watchNewSocket(ctx, n.RegistrationSocket(), oldSock)
	kubeletStart := time.Now()
	kubelet := n.StartKubeletNoWait(ctx)
	var visible time.Time
	select {
	case visible = <-sockSeen:
	case <-ctx.Done():
		t.Fatal("new kubelet's registration socket never appeared")
	}
	podLevel, nodeLevel := measure(ctx, visible, 30*time.Second,
		func(ctx context.Context) bool { return podResourcesAllocatable(ctx, n.PodResourcesSocket()) == 8 },
		func(ctx context.Context) bool { return nodeGPUs(ctx, cs, nodeName, 8, true) == nil })
	n.WaitReady(ctx, kubelet)
	t.Logf("kubelet restart: registration socket visible %s after the kubelet's start; re-registered (%d → %d registrations); allocatable 8 %s (pod-resources) / %s (Node) after the socket appeared, Node %s after the kubelet's start",
		visible.Sub(kubeletStart).Round(time.Millisecond), regs, a.manager.Registrations(deviceplugin.GPUResource), podLevel, nodeLevel,
		(visible.Sub(kubeletStart) + nodeLevel).Round(time.Millisecond))
	if a.manager.Registrations(deviceplugin.GPUResource) <= regs {
		t.Errorf("plugin not re-registered after the kubelet restart")
	}
	if nodeLevel < 0 || nodeLevel > restartBound {
		t.Fatalf("Node allocatable back to 8 after %s, want ≤ %s", nodeLevel, restartBound)
	}
	// The allocation survives the restart (kubelet checkpoint) once the new
	// kubelet has re-admitted the pod.
	testenv.Eventually(t, 30*time.Second, "pod keeps its GPUs after the restart", func() error {
		after, err := podGPUs(ctx, n.PodResourcesSocket(), podName)
		if err != nil || !sameSet(after, held) {
			return fmt.Errorf("pod holds %v (err %v), want %v", after, err, held)
		}
		return nil
	})

	// 4. A critical XID on one GPU (not one the pod holds) takes only that
	// GPU out: allocatable 7 within 1s, at the pod-resources level
	// (device manager) and on the Node. The mock keeps failing probes of
	// the GPU until step 5.
	bad := ""
	for _, u := range a.mock.UUIDs() {
		if !slices.Contains(held, u) {
			bad = u
			break
		}
	}
	a.mock.SetLost(bad, true)
	injected := time.Now()
	if err := a.mock.InjectXID(bad, 79); err != nil {
		t.Fatal(err)
	}
	podLevel, nodeLevel = measure(ctx, injected, 10*time.Second,
		func(ctx context.Context) bool { return podResourcesAllocatable(ctx, n.PodResourcesSocket()) == 7 },
		func(ctx context.Context) bool { return nodeGPUs(ctx, cs, nodeName, 7, false) == nil })
	t.Logf("XID 79 on %s → allocatable 7 after %s (pod-resources) / %s (Node)", bad, podLevel, nodeLevel)
	if podLevel < 0 || podLevel > xidBound {
		t.Errorf("pod-resources allocatable 7 after %s, want ≤ %s", podLevel, xidBound)
	}
	if nodeLevel < 0 || nodeLevel > xidBound {
		t.Errorf("Node allocatable 7 after %s, want ≤ %s", nodeLevel, xidBound)
	}
	if t.Failed() {
		t.FailNow()
	}

	// 5. Recovery: NVML answers again; the next probe after the hold marks
	// the GPU healthy and the kubelet counts 8 again.
	a.mock.SetLost(bad, false)
	recovered := time.Now()
	podLevel, nodeLevel = measure(ctx, recovered, 30*time.Second,
		func(ctx context.Context) bool { return podResourcesAllocatable(ctx, n.PodResourcesSocket()) == 8 },
		func(ctx context.Context) bool { return nodeGPUs(ctx, cs, nodeName, 8, false) == nil })
	t.Logf("GPU usable again → allocatable 8 after %s (pod-resources) / %s (Node) (hold %s, probe every %s)", podLevel, nodeLevel, a.hold, a.probe)
	if podLevel < 0 || nodeLevel < 0 {
		t.Fatalf("allocatable not back to 8 within 30s of recovery")
	}
	if st := a.monitor.Snapshot()[bad]; st.State != health.Healthy || st.LastXID != 79 {
		t.Fatalf("health of %s after recovery: %+v", bad, st)
	}
}

// agent is the GPU agent's device plugin and health monitor, wired as
// cmd/fke-gpu-agent wires them, in this process.
type agent struct {
	mock        *nvml.Mock
	monitor     *health.Monitor
	manager     *deviceplugin.Manager
	hold, probe time.Duration
}

func startAgent(t *testing.T, n *node, cs kubernetes.Interface, nodeName string) *agent {
	t.Helper()
	logFile, err := os.Create(filepath.Join(n.dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{hold: 300 * time.Millisecond, probe: 100 * time.Millisecond}
	if a.mock, err = nvml.NewMock("dgxh100", nodeName); err != nil {
		t.Fatal(err)
	}
	devs, err := a.mock.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	api := gpunode.FromCoreV1(cs.CoreV1())
	a.monitor = health.NewMonitor(a.mock, a.mock.UUIDs(), health.Options{
		Hold:          a.hold,
		ProbeInterval: a.probe,
		Reporter:      &gpunode.Reporter{API: api, Node: nodeName},
		Log:           log.With("component", "health"),
	})
	res, err := deviceplugin.BuildResources(devs, gpuconfig.MIGStrategyNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.manager, err = deviceplugin.NewManager(res, deviceplugin.TopologyOf(devs), deviceplugin.ManagerOptions{
		Dir:               n.PluginDir(),
		Health:            a.monitor,
		Log:               log.With("component", "deviceplugin"),
		SelfCheck:         gpunode.Allocatable{API: api, Node: nodeName},
		SelfCheckInterval: gpuconfig.Default().DevicePlugin.SelfCheckInterval.Duration,
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := a.monitor.Run(ctx); err != nil {
			t.Errorf("health monitor: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := a.manager.Run(ctx); err != nil {
			t.Errorf("device plugin manager: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := logFile.Close(); err != nil {
			t.Errorf("closing agent log: %v", err)
		}
		if t.Failed() {
			t.Logf("---- tail of agent.log ----\n%s", tail(logFile.Name(), 40))
		}
	})
	testenv.Eventually(t, 10*time.Second, "NVML event stream open", func() error {
		if a.mock.OpenEventStreams() == 0 {
			return fmt.Errorf("no event stream")
		}
		return nil
	})
	return a
}

// nodeGPUs checks the Node's allocatable (and capacity, when withCapacity) nvidia.com/gpu.
func nodeGPUs(ctx context.Context, cs kubernetes.Interface, name string, want int64, withCapacity bool) error {
	nd, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	alloc, capacity := nd.Status.Allocatable[gpu], nd.Status.Capacity[gpu]
	if alloc.Value() != want || (withCapacity && capacity.Value() != want) {
		return fmt.Errorf("node %s: capacity %s, allocatable %s nvidia.com/gpu; want %d", name, capacity.String(), alloc.String(), want)
	}
	return nil
}

// setNodeGPUs overwrites the Node's nvidia.com/gpu capacity and allocatable.
func setNodeGPUs(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, v int) {
	t.Helper()
	patch := fmt.Sprintf(`{"status":{"capacity":{%[1]q:"%[2]d"},"allocatable":{%[1]q:"%[2]d"}}}`, gpu, v)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patching node %s: %v", name, err)
	}
}

// createGPUPod binds a pod asking for gpus GPUs to the node; it never runs
// (no image, no CNI), which device allocation does not need.
func createGPUPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, nodeName string, gpus int64) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cuda-2gpu", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "cuda",
				Image:           "fke.invalid/cuda:none",
				ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{gpu: *resource.NewQuantity(gpus, resource.DecimalSI)},
				},
			}},
		},
	}
	// The namespace's ServiceAccount may not exist yet right after the
	// cluster comes up.
	testenv.Eventually(t, 60*time.Second, "pod created", func() error {
		_, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	return pod.Name
}

// podResourcesClient dials the kubelet's pod-resources socket. A new
// connection per call: the kubelet restarts under it, and a connection in
// backoff would distort the timings.
func podResourcesClient(socket string) (podresourcesapi.PodResourcesListerClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return podresourcesapi.NewPodResourcesListerClient(conn), func() { conn.Close() }, nil
}

// podResourcesAllocatable returns how many nvidia.com/gpu devices the
// kubelet's device manager counts as allocatable, -1 on error.
func podResourcesAllocatable(ctx context.Context, socket string) int {
	c, done, err := podResourcesClient(socket)
	if err != nil {
		return -1
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return -1
	}
	count := 0
	for _, d := range resp.GetDevices() {
		if d.GetResourceName() == deviceplugin.GPUResource {
			count += len(d.GetDeviceIds())
		}
	}
	return count
}

// podGPUs returns, sorted, the GPU UUIDs the kubelet assigned to the pod,
// read through the agent's own pod-resources client (internal/gpu/metrics).
func podGPUs(ctx context.Context, socket, pod string) ([]string, error) {
	pr, err := gpumetrics.NewPodResources(socket, 0, nil)
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	owners, err := pr.Owners(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for uuid, holders := range owners {
		for _, o := range holders {
			if o.Pod == pod && o.Namespace == metav1.NamespaceDefault && o.Container == "cuda" {
				out = append(out, uuid)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// measure polls both conditions concurrently from now on and returns how
// long after since each first held (-1 if not within timeout).
func measure(ctx context.Context, since time.Time, timeout time.Duration, a, b func(context.Context) bool) (time.Duration, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	res := [2]time.Duration{-1, -1}
	for i, cond := range []func(context.Context) bool{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(pollEvery)
			defer tick.Stop()
			for {
				if cond(ctx) {
					res[i] = time.Since(since).Round(time.Millisecond)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	return res[0], res[1]
}

// watchNewSocket reports when a socket at path that is not old appears.
func watchNewSocket(ctx context.Context, path string, old os.FileInfo) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if cur, err := os.Stat(path); err == nil && (!os.SameFile(cur, old) || !cur.ModTime().Equal(old.ModTime())) {
				ch <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(hex.EncodeToString(b))
}
