// Package gpumetrics is fke's GPU custom-metrics adapter: it serves per-pod
// GPU metrics under the DCGM exporter's names (DCGM_FI_DEV_GPU_UTIL, ...)
// on the custom metrics API (custom.metrics.k8s.io), so that
// HorizontalPodAutoscalers can scale on them. A pod's value is aggregated
// over the GPUs it holds. Values come from the fke-gpu-agent of each GPU
// node (scraped, with the pod attribution the agent reads from the
// kubelet's pod-resources API) or, for pods no agent reports (kwok nodes),
// from a simulation driven by the annotation fke.dev/simulate-gpu-load.
//
// The decision code (aggregation, the simulation model, parsing the
// agent's exposition) is pure; provider.go wires it to informers.
package gpumetrics

import (
	"math"
	"slices"
)

// Names of the metrics the adapter serves: the ones fke-gpu-agent exports
// per GPU, under the DCGM exporter's names.
const (
	GPUUtil     = "DCGM_FI_DEV_GPU_UTIL"
	MemCopyUtil = "DCGM_FI_DEV_MEM_COPY_UTIL"
	FBUsed      = "DCGM_FI_DEV_FB_USED"
	FBFree      = "DCGM_FI_DEV_FB_FREE"
	GPUTemp     = "DCGM_FI_DEV_GPU_TEMP"
	PowerUsage  = "DCGM_FI_DEV_POWER_USAGE"
	SMClock     = "DCGM_FI_DEV_SM_CLOCK"
	XIDErrors   = "DCGM_FI_DEV_XID_ERRORS"
)

// Aggregation says how the values of a pod's GPUs make the pod's value.
type Aggregation string

const (
	// Mean: rates and percentages (utilization, clocks); a pod with two GPUs
	// at 100 % and 0 % is 50 % busy.
	Mean Aggregation = "mean"
	// Sum: amounts (memory, power); a pod's two GPUs with 10 GiB used each
	// use 20 GiB.
	Sum Aggregation = "sum"
	// Max: states where the worst GPU matters (temperature, the last XID).
	Max Aggregation = "max"
)

// Metric is one metric the adapter serves for pods.
type Metric struct {
	Name        string
	Aggregation Aggregation
	// Unit of the value, as the DCGM exporter documents it.
	Unit string
}

// Metrics lists every metric served, in the order the API lists them.
var Metrics = []Metric{
	{GPUUtil, Mean, "%"},
	{MemCopyUtil, Mean, "%"},
	{FBUsed, Sum, "MiB"},
	{FBFree, Sum, "MiB"},
	{GPUTemp, Max, "C"},
	{PowerUsage, Sum, "W"},
	{SMClock, Mean, "MHz"},
	{XIDErrors, Max, ""},
}

// Lookup returns the served metric called name.
func Lookup(name string) (Metric, bool) {
	i := slices.IndexFunc(Metrics, func(m Metric) bool { return m.Name == name })
	if i < 0 {
		return Metric{}, false
	}
	return Metrics[i], true
}

// Names returns the names of the served metrics.
func Names() []string {
	out := make([]string, len(Metrics))
	for i, m := range Metrics {
		out[i] = m.Name
	}
	return out
}

// Aggregate combines per-GPU values by a. It reports false when there is
// no value (a pod with no GPU has no GPU metrics).
func Aggregate(a Aggregation, values []float64) (float64, bool) {
	if len(values) == 0 {
		return 0, false
	}
	switch a {
	case Sum, Mean:
		s := 0.0
		for _, v := range values {
			s += v
		}
		if a == Mean {
			s /= float64(len(values))
		}
		return s, true
	case Max:
		m := math.Inf(-1)
		for _, v := range values {
			m = math.Max(m, v)
		}
		return m, true
	}
	return 0, false
}

// PodKey names a pod.
type PodKey struct{ Namespace, Name string }

func (k PodKey) String() string { return k.Namespace + "/" + k.Name }

// Values are a pod's metrics, by metric name.
type Values map[string]float64

// PerGPU are the metrics of each GPU a pod holds: GPU UUID -> metric name -> value.
type PerGPU map[string]map[string]float64

// AggregatePod turns the per-GPU metrics of a pod into the pod's values,
// each metric by its Aggregation. A metric no GPU reports is left out.
func AggregatePod(gpus PerGPU) Values {
	out := Values{}
	uuids := make([]string, 0, len(gpus))
	for u := range gpus {
		uuids = append(uuids, u)
	}
	slices.Sort(uuids) // sums in a fixed order: the same input gives the same bits
	for _, m := range Metrics {
		var vs []float64
		for _, u := range uuids {
			if v, ok := gpus[u][m.Name]; ok {
				vs = append(vs, v)
			}
		}
		if v, ok := Aggregate(m.Aggregation, vs); ok {
			out[m.Name] = v
		}
	}
	return out
}
