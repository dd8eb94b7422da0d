package gpumetrics

import (
	"fmt"
	"math"
	"strconv"
)

// The simulation model, for pods whose GPUs no agent reports (kwok nodes).
// A workload (a Deployment, StatefulSet, ReplicaSet or a lone pod) is
// offered a load in GPU-equivalents by the annotation
// fke.dev/simulate-gpu-load; a load balancer spreads it evenly over the
// workload's Ready pods, so each Ready pod's GPUs are busy
//
//	utilization = min(100, load × 100 / readyPods / gpusPerPod)  [%]
//
// and pods that are not Ready get no traffic (0 %). The other metrics
// follow the utilization u (0-100) of each GPU:
//
//	DCGM_FI_DEV_MEM_COPY_UTIL  u / 2
//	DCGM_FI_DEV_FB_USED        GPU memory × u / 100 (MiB, rounded down)
//	DCGM_FI_DEV_FB_FREE        GPU memory − used
//	DCGM_FI_DEV_GPU_TEMP       30 + u / 2 (C)
//	DCGM_FI_DEV_POWER_USAGE    60 + 2.4 × u (W)
//	DCGM_FI_DEV_SM_CLOCK       210 MHz idle, 1410 MHz busy
//	DCGM_FI_DEV_XID_ERRORS     0
//
// GPU memory is the node's nvidia.com/gpu.memory label (MiB); without it
// the two memory metrics are left out.

// Simulated GPU figures.
const (
	simIdleTempC    = 30
	simIdlePowerW   = 60
	simPowerPerPct  = 2.4
	simIdleClockMHz = 210
	simBusyClockMHz = 1410
)

// ParseLoad reads the value of fke.dev/simulate-gpu-load: a finite,
// non-negative decimal number of GPU-equivalents.
func ParseLoad(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("GPU load %q is not a non-negative number of GPU-equivalents, such as 4.5", s)
	}
	return v, nil
}

// SimulatedUtilization is the utilization (%) of each GPU of a Ready pod
// of a workload offered load GPU-equivalents over ready Ready pods holding
// gpusPerPod GPUs each: min(100, load×100/ready/gpusPerPod); 0 when there
// is no load, no Ready pod or no GPU.
func SimulatedUtilization(load float64, ready, gpusPerPod int) float64 {
	if load <= 0 || ready <= 0 || gpusPerPod <= 0 {
		return 0
	}
	return math.Min(100, load*100/float64(ready)/float64(gpusPerPod))
}

// SimulatedGPU returns the metrics of one simulated GPU busy u percent,
// with memoryMiB of memory (0: unknown, no memory metrics).
func SimulatedGPU(u float64, memoryMiB int64) map[string]float64 {
	u = math.Max(0, math.Min(100, u))
	clock := float64(simIdleClockMHz)
	if u > 0 {
		clock = simBusyClockMHz
	}
	m := map[string]float64{
		GPUUtil:     u,
		MemCopyUtil: u / 2,
		GPUTemp:     simIdleTempC + u/2,
		PowerUsage:  simIdlePowerW + simPowerPerPct*u,
		SMClock:     clock,
		XIDErrors:   0,
	}
	if memoryMiB > 0 {
		used := math.Floor(float64(memoryMiB) * u / 100)
		m[FBUsed] = used
		m[FBFree] = float64(memoryMiB) - used
	}
	return m
}

// SimPod is what the simulation needs to know of one pod.
type SimPod struct {
	Key PodKey
	// Workload identifies the object whose annotation gives the load (pods
	// of one workload share it), e.g. "Deployment/default/infer".
	Workload string
	// Load is the workload's offered load in GPU-equivalents.
	Load float64
	// Ready: the pod's Ready condition is true and it is not terminating.
	Ready bool
	// GPUs is the number of GPUs the pod asks for (nvidia.com/gpu).
	GPUs int
	// GPUMemoryMiB is the memory of one GPU of its node (0: unknown).
	GPUMemoryMiB int64
}

// Simulate returns the metrics of each pod that holds GPUs, by the model
// above. Pods of a workload are counted together: a workload's load is
// spread over those of its pods in pods that are Ready and hold GPUs.
func Simulate(pods []SimPod) map[PodKey]Values {
	ready := map[string]int{}
	for _, p := range pods {
		if p.Ready && p.GPUs > 0 {
			ready[p.Workload]++
		}
	}
	out := make(map[PodKey]Values, len(pods))
	for _, p := range pods {
		if p.GPUs <= 0 {
			continue
		}
		u := 0.0
		if p.Ready {
			u = SimulatedUtilization(p.Load, ready[p.Workload], p.GPUs)
		}
		gpus := PerGPU{}
		g := SimulatedGPU(u, p.GPUMemoryMiB)
		for i := range p.GPUs {
			gpus[fmt.Sprintf("sim-%d", i)] = g
		}
		out[p.Key] = AggregatePod(gpus)
	}
	return out
}
