package decide

import (
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// resources is a resource vector in integer units: milli-cpu, bytes, pod
// slots and extended resources as plain counts. It is what the simulation
// adds and compares; a ResourceList is only parsed once per pod or node.
type resources struct {
	milliCPU  int64
	memory    int64
	ephemeral int64
	pods      int64
	scalar    map[corev1.ResourceName]int64
}

func resourcesFromList(l corev1.ResourceList) resources {
	var r resources
	for name, q := range l {
		r.addQuantity(name, q, 1)
	}
	return r
}

func (r *resources) addQuantity(name corev1.ResourceName, q resource.Quantity, sign int64) {
	switch name {
	case corev1.ResourceCPU:
		r.milliCPU += sign * q.MilliValue()
	default:
		r.addValue(name, sign*q.Value())
	}
}

func (r *resources) addValue(name corev1.ResourceName, v int64) {
	switch name {
	case corev1.ResourceCPU:
		r.milliCPU += v
	case corev1.ResourceMemory:
		r.memory += v
	case corev1.ResourceEphemeralStorage:
		r.ephemeral += v
	case corev1.ResourcePods:
		r.pods += v
	default:
		if v == 0 {
			return
		}
		if r.scalar == nil {
			r.scalar = make(map[corev1.ResourceName]int64, 2)
		}
		r.scalar[name] += v
	}
}

func (r resources) get(name corev1.ResourceName) int64 {
	switch name {
	case corev1.ResourceCPU:
		return r.milliCPU
	case corev1.ResourceMemory:
		return r.memory
	case corev1.ResourceEphemeralStorage:
		return r.ephemeral
	case corev1.ResourcePods:
		return r.pods
	default:
		return r.scalar[name]
	}
}

func (r resources) clone() resources {
	c := r
	if r.scalar != nil {
		c.scalar = make(map[corev1.ResourceName]int64, len(r.scalar))
		for k, v := range r.scalar {
			c.scalar[k] = v
		}
	}
	return c
}

// equal reports whether r and o request the same (absent scalars are 0).
func (r resources) equal(o resources) bool {
	if r.milliCPU != o.milliCPU || r.memory != o.memory || r.ephemeral != o.ephemeral || r.pods != o.pods {
		return false
	}
	for k, v := range r.scalar {
		if o.scalar[k] != v {
			return false
		}
	}
	for k, v := range o.scalar {
		if r.scalar[k] != v {
			return false
		}
	}
	return true
}

// add adds o to r; sign -1 subtracts.
func (r *resources) add(o resources, sign int64) {
	r.milliCPU += sign * o.milliCPU
	r.memory += sign * o.memory
	r.ephemeral += sign * o.ephemeral
	r.pods += sign * o.pods
	for k, v := range o.scalar {
		r.addValue(k, sign*v)
	}
}

// maxWith raises every component of r to at least o's.
func (r *resources) maxWith(o resources) {
	r.milliCPU = max(r.milliCPU, o.milliCPU)
	r.memory = max(r.memory, o.memory)
	r.ephemeral = max(r.ephemeral, o.ephemeral)
	r.pods = max(r.pods, o.pods)
	for k, v := range o.scalar {
		if v > r.scalar[k] {
			r.addValue(k, v-r.scalar[k])
		}
	}
}

func (r resources) toList() corev1.ResourceList {
	l := corev1.ResourceList{}
	if r.milliCPU != 0 {
		l[corev1.ResourceCPU] = *resource.NewMilliQuantity(r.milliCPU, resource.DecimalSI)
	}
	if r.memory != 0 {
		l[corev1.ResourceMemory] = *resource.NewQuantity(r.memory, resource.BinarySI)
	}
	if r.ephemeral != 0 {
		l[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(r.ephemeral, resource.BinarySI)
	}
	for k, v := range r.scalar {
		format := resource.DecimalSI
		if strings.HasPrefix(string(k), corev1.ResourceHugePagesPrefix) {
			format = resource.BinarySI
		}
		l[k] = *resource.NewQuantity(v, format)
	}
	return l
}

// gpuTotal sums every GPU resource (whole GPUs, MIG slices, shared replicas).
func (r resources) gpuTotal() int64 {
	var n int64
	for k, v := range r.scalar {
		if IsGPUResource(k) {
			n += v
		}
	}
	return n
}

// IsGPUResource reports whether name is a GPU resource: anything the NVIDIA
// device plugin advertises ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
// "nvidia.com/gpu.shared", renamed time-sliced resources), "amd.com/gpu" and
// Intel's "gpu.intel.com/..." resources.
func IsGPUResource(name corev1.ResourceName) bool {
	s := string(name)
	return strings.HasPrefix(s, "nvidia.com/") || s == "amd.com/gpu" || strings.HasPrefix(s, "gpu.intel.com/")
}

// containerRequests returns a container's requests, taking a limit as the
// request where only the limit is set (the API server's defaulting, which
// pod templates in ProvisioningRequests do not get).
func containerRequests(c *corev1.Container) resources {
	r := resourcesFromList(c.Resources.Requests)
	for name, q := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; !ok {
			r.addQuantity(name, q, 1)
		}
	}
	return r
}

// podRequests computes a pod's effective request as kube-scheduler does:
// the larger of (regular containers + restartable init containers, i.e.
// sidecars) and, for each init container in order, its request plus the
// sidecars started before it; pod-level requests replace the container
// aggregate for the resources they set; then the pod overhead is added.
func podRequests(pod *corev1.Pod) resources {
	var sum resources
	for i := range pod.Spec.Containers {
		sum.add(containerRequests(&pod.Spec.Containers[i]), 1)
	}
	var sidecars, initMax resources
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := containerRequests(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum.add(r, 1)
			sidecars.add(r, 1)
			initMax.maxWith(sidecars)
			continue
		}
		r.add(sidecars, 1)
		initMax.maxWith(r)
	}
	sum.maxWith(initMax)
	if pl := pod.Spec.Resources; pl != nil {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			q, ok := pl.Requests[name]
			if !ok {
				q, ok = pl.Limits[name]
			}
			if ok {
				sum.addValue(name, -sum.get(name))
				sum.addQuantity(name, q, 1)
			}
		}
		for name, q := range pl.Requests {
			if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
				sum.addValue(name, -sum.get(name))
				sum.addQuantity(name, q, 1)
			}
		}
	}
	for name, q := range pod.Spec.Overhead {
		sum.addQuantity(name, q, 1)
	}
	return sum
}

// ResourceRequests returns the effective resource request of a pod as
// kube-scheduler computes it for the NodeResourcesFit filter:
// max(sum of containers and sidecars, largest init container plus the
// sidecars before it), pod-level requests where set, plus spec.overhead. A
// container limit without a request counts as the request. Zero entries are
// omitted; the pod's own slot ("pods": 1) is not included.
func ResourceRequests(pod *corev1.Pod) corev1.ResourceList {
	if pod == nil {
		return corev1.ResourceList{}
	}
	return podRequests(pod).toList()
}

// nodeGPUs counts a node's physical GPUs: the GPU Feature Discovery count
// label, else the Cluster API template annotation, else the nvidia.com/gpu
// allocatable divided by the time-slicing replicas label, else the other
// whole-GPU resources. MIG-only nodes without labels count 0.
func nodeGPUs(n *corev1.Node, alloc resources) int64 {
	if n == nil {
		return 0
	}
	if v, err := strconv.ParseInt(n.Labels[LabelGPUCount], 10, 64); err == nil && v >= 0 {
		return v
	}
	if v, err := strconv.ParseInt(n.Annotations[AnnotationTemplateGPUCount], 10, 64); err == nil && v >= 0 {
		return v
	}
	if g := alloc.scalar["nvidia.com/gpu"]; g > 0 {
		if rep, err := strconv.ParseInt(n.Labels[LabelGPUReplicas], 10, 64); err == nil && rep > 1 {
			return (g + rep - 1) / rep
		}
		return g
	}
	return alloc.scalar["amd.com/gpu"]
}

// fraction returns used/total, 0 when total is not positive.
func fraction(used, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(used) / float64(total)
}

// sortedScalarNames lists a vector's extended resource names, GPU resources
// first, then alphabetically, so that reasons are stable.
func sortedScalarNames(r resources) []corev1.ResourceName {
	if len(r.scalar) == 0 {
		return nil
	}
	names := make([]corev1.ResourceName, 0, len(r.scalar))
	for k, v := range r.scalar {
		if v != 0 {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		gi, gj := IsGPUResource(names[i]), IsGPUResource(names[j])
		if gi != gj {
			return gi
		}
		return names[i] < names[j]
	})
	return names
}

// capInt clamps an int64 to an int.
func capInt(v int64) int {
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	if v < math.MinInt32 {
		return math.MinInt32
	}
	return int(v)
}
