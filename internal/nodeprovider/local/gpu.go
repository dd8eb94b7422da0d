package local

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/hostlib"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/tenant"
)

// mockByProduct maps a GPU product of the catalog to the go-nvml mock that
// simulates a machine of eight of them.
var mockByProduct = map[string]string{
	"NVIDIA-A100-SXM4-80GB": "dgxa100",
	"NVIDIA-H100-80GB-HBM3": "dgxh100",
	"NVIDIA-H200":           "dgxh200",
	"NVIDIA-B200":           "dgxb200",
}

// mockGPUCount is the number of GPUs of every go-nvml mock machine.
const mockGPUCount = 8

// GPUBackend chooses the GPU agent's NVML backend for a node of gpu: the
// real driver when the host has one, else the mock of the same machine.
// Types no mock simulates cannot be made on a host without GPUs.
func GPUBackend(gpu *fkev1.InstanceGPU, hostDriver bool) (string, error) {
	if hostDriver {
		return gpuconfig.BackendReal, nil
	}
	mock, ok := mockByProduct[gpu.Product]
	if !ok || gpu.Count != mockGPUCount {
		return "", fmt.Errorf("this host has no NVIDIA driver, and no simulated machine has %d × %s (simulated: 8 × A100, H100, H200 or B200)", gpu.Count, gpu.Product)
	}
	return gpuconfig.BackendMockPrefix + mock, nil
}

// HostHasGPUDriver reports whether this host's NVIDIA driver is loaded
// (its control device exists) and its NVML library installed.
func HostHasGPUDriver() bool {
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		return false
	}
	_, err := hostlib.LibraryPath("/", "libnvidia-ml.so.1")
	return err == nil
}

// nodeShape returns what the kubelet of a node of type it reserves, and a
// note when the type had to be shrunk: a GPU type larger than this host
// (eight GPUs come with hundreds of CPUs) gets the whole host, since its
// GPUs are what the node is for; a CPU type must fit.
func nodeShape(hostCPU, hostMemory resource.Quantity, it *fkev1.InstanceType) (corev1.ResourceList, string, error) {
	reserved, err := Reservation(hostCPU, hostMemory, it.Spec.CPU, it.Spec.Memory)
	if err == nil || it.Spec.GPU == nil {
		return reserved, "", err
	}
	cpu, mem := it.Spec.CPU, it.Spec.Memory
	if cpu.Cmp(hostCPU) > 0 {
		cpu = hostCPU
	}
	if mem.Cmp(hostMemory) > 0 {
		mem = hostMemory
	}
	reserved, err = Reservation(hostCPU, hostMemory, cpu, mem)
	if err != nil {
		return nil, "", err
	}
	return reserved, fmt.Sprintf("instance type %s (%s CPU, %s memory) is larger than this host: the node has %s CPU and %s memory",
		it.Name, it.Spec.CPU.String(), it.Spec.Memory.String(), cpu.String(), mem.String()), nil
}

// GPUAgents installs fke's GPU agent on the local nodes of GPU pools: one
// DaemonSet per pool, with the backend this host allows and the pool's
// sharing settings. It applies a pool's agent again when what it would
// apply changed, and every few minutes (a deleted DaemonSet comes back).
type GPUAgents struct {
	// Registry is host:port of the registry nodes pull the agent from.
	Registry string
	// HostDriver says whether this host has an NVIDIA driver (HostHasGPUDriver).
	HostDriver bool

	mu      sync.Mutex
	applied map[string]appliedAgent // by pool object key
}

// appliedAgent is what was applied for a pool, and when.
type appliedAgent struct {
	opts addons.GPUAgentOptions
	at   time.Time
}

// gpuAgentReapply is how often an unchanged agent is applied again, so
// that a DaemonSet or ConfigMap someone deleted or edited comes back.
const gpuAgentReapply = 5 * time.Minute

// GPUAgents returns the installer of the GPU agent of this provider's GPU pools.
func (p *Provider) GPUAgents() *GPUAgents {
	return &GPUAgents{Registry: p.opts.Registry, HostDriver: p.opts.HostGPUDriver}
}

// Options returns the agent options of np's nodes of type it.
func (g *GPUAgents) Options(np *fkev1.NodePool, it *fkev1.InstanceType) (addons.GPUAgentOptions, error) {
	if g.Registry == "" {
		return addons.GPUAgentOptions{}, fmt.Errorf("no registry to pull the GPU agent from (fke up runs one; see fke doctor)")
	}
	backend, err := GPUBackend(it.Spec.GPU, g.HostDriver)
	if err != nil {
		return addons.GPUAgentOptions{}, err
	}
	o := addons.GPUAgentOptions{Pool: np.PoolName(), Image: image.GPUAgent.Ref(g.Registry), Backend: backend}
	if gpu := np.Spec.GPU; gpu != nil {
		o.TimeSlicingReplicas, o.MIGStrategy = gpu.TimeSlicingReplicas, gpu.MIGStrategy
	}
	return o, nil
}

// Ensure applies the agent of local GPU pool np in tenant t.
func (g *GPUAgents) Ensure(ctx context.Context, t *tenant.Tenant, np *fkev1.NodePool, it *fkev1.InstanceType) error {
	o, err := g.Options(np, it)
	if err != nil {
		return err
	}
	key := t.Key + "/" + np.Name
	g.mu.Lock()
	last, ok := g.applied[key]
	g.mu.Unlock()
	if ok && last.opts == o && time.Since(last.at) < gpuAgentReapply {
		return nil
	}
	if err := addons.EnsureGPUAgent(ctx, t.Config, o); err != nil {
		return err
	}
	g.mu.Lock()
	if g.applied == nil {
		g.applied = map[string]appliedAgent{}
	}
	g.applied[key] = appliedAgent{opts: o, at: time.Now()}
	g.mu.Unlock()
	return nil
}

// Remove deletes the agent of np (the pool is being deleted).
func (g *GPUAgents) Remove(ctx context.Context, t *tenant.Tenant, np *fkev1.NodePool) error {
	g.mu.Lock()
	delete(g.applied, t.Key+"/"+np.Name)
	g.mu.Unlock()
	return addons.DeleteGPUAgent(ctx, t.Clientset, np.PoolName())
}
