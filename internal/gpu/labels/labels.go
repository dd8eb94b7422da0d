// Package labels computes the GPU Feature Discovery compatible node labels
// (nvidia.com/gpu.product, nvidia.com/mig.strategy, ...) from discovered
// GPUs and the agent's configuration (a pure function, For), and applies
// them to the agent's own Node (Labeler), touching only nvidia.com/ labels
// it owns.
package labels

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/nvml"
)

// Prefix is the prefix of the GFD-compatible labels this package sets.
const Prefix = "nvidia.com/"

// FKEPrefix is the prefix of fke's own GPU labels.
const FKEPrefix = "fke.dev/gpu."

// Simulated is "true" on a node whose GPUs come from a mock backend or
// have no device nodes: pods see their UUIDs but no devices.
const Simulated = FKEPrefix + "simulated"

// Owns reports whether the agent sets (and may remove) label key.
func Owns(key string) bool {
	return strings.HasPrefix(key, Prefix) || strings.HasPrefix(key, FKEPrefix)
}

// Label keys.
const (
	Present           = "nvidia.com/gpu.present"
	Product           = "nvidia.com/gpu.product"
	Count             = "nvidia.com/gpu.count"
	Memory            = "nvidia.com/gpu.memory"
	Family            = "nvidia.com/gpu.family"
	ComputeMajor      = "nvidia.com/gpu.compute.major"
	ComputeMinor      = "nvidia.com/gpu.compute.minor"
	Machine           = "nvidia.com/gpu.machine"
	Replicas          = "nvidia.com/gpu.replicas"
	SharingStrategy   = "nvidia.com/gpu.sharing-strategy"
	MIGCapable        = "nvidia.com/mig.capable"
	MIGStrategy       = "nvidia.com/mig.strategy"
	DriverMajor       = "nvidia.com/cuda.driver-version.major"
	DriverMinor       = "nvidia.com/cuda.driver-version.minor"
	DriverRevision    = "nvidia.com/cuda.driver-version.revision"
	DriverFull        = "nvidia.com/cuda.driver-version.full"
	RuntimeMajor      = "nvidia.com/cuda.runtime-version.major"
	RuntimeMinor      = "nvidia.com/cuda.runtime-version.minor"
	RuntimeFull       = "nvidia.com/cuda.runtime-version.full"
	GPUMultiprocessor = "nvidia.com/gpu.multiprocessors"
	GPUSlicesGI       = "nvidia.com/gpu.slices.gi"
	GPUSlicesCI       = "nvidia.com/gpu.slices.ci"
)

// For returns the labels for a node with devs under cfg; simulated says
// that containers get no devices for them (see Simulated). Heterogeneous
// nodes are described by their first GPU, as GFD does.
func For(sys nvml.System, devs []nvml.Device, cfg gpuconfig.Config, simulated bool) map[string]string {
	l := map[string]string{
		Simulated:       strconv.FormatBool(simulated),
		MIGStrategy:     string(orNone(cfg.MIGStrategy)),
		SharingStrategy: "none",
		Count:           strconv.Itoa(len(devs)),
	}
	if len(devs) == 0 {
		return l
	}
	l[Present] = "true"
	first := devs[0]
	l[Product] = value(first.Name)
	l[Memory] = strconv.FormatUint(first.MemoryMiB, 10)
	l[Family] = value(first.Family)
	l[ComputeMajor] = strconv.Itoa(first.ComputeMajor)
	l[ComputeMinor] = strconv.Itoa(first.ComputeMinor)
	if cfg.Machine != "" {
		l[Machine] = value(cfg.Machine)
	}
	capable := false
	for _, d := range devs {
		capable = capable || d.MIGCapable
	}
	l[MIGCapable] = strconv.FormatBool(capable)

	if parts := strings.Split(sys.DriverVersion, "."); sys.DriverVersion != "" {
		l[DriverFull] = value(sys.DriverVersion)
		l[DriverMajor] = value(parts[0])
		if len(parts) > 1 {
			l[DriverMinor] = value(parts[1])
		}
		if len(parts) > 2 {
			l[DriverRevision] = value(parts[2])
		}
	}
	if sys.CUDADriverVersion > 0 {
		major, minor := sys.CUDAVersion()
		l[RuntimeMajor] = strconv.Itoa(major)
		l[RuntimeMinor] = strconv.Itoa(minor)
		l[RuntimeFull] = fmt.Sprintf("%d.%d", major, minor)
	}

	migs := map[string][]nvml.MIGDevice{}
	for _, d := range devs {
		if d.MIGEnabled {
			for _, m := range d.MIGDevices {
				migs[m.Profile] = append(migs[m.Profile], m)
			}
		}
	}
	switch cfg.MIGStrategy {
	case gpuconfig.MIGStrategySingle:
		if len(migs) == 1 {
			for profile, ms := range migs {
				m := ms[0]
				l[Product] = value(first.Name + "-MIG-" + profile)
				l[Count] = strconv.Itoa(len(ms))
				l[Memory] = strconv.FormatUint(m.MemoryMiB, 10)
				l[GPUMultiprocessor] = strconv.Itoa(m.Multiprocessors)
				l[GPUSlicesGI] = strconv.Itoa(m.GISlices)
				l[GPUSlicesCI] = strconv.Itoa(m.CISlices)
			}
		}
	case gpuconfig.MIGStrategyMixed:
		for profile, ms := range migs {
			m := ms[0]
			base := "nvidia.com/mig-" + profile
			l[base+".count"] = strconv.Itoa(len(ms))
			l[base+".memory"] = strconv.FormatUint(m.MemoryMiB, 10)
			l[base+".multiprocessors"] = strconv.Itoa(m.Multiprocessors)
			l[base+".slices.gi"] = strconv.Itoa(m.GISlices)
			l[base+".slices.ci"] = strconv.Itoa(m.CISlices)
		}
	}

	if ts := cfg.Sharing.TimeSlicing; ts != nil {
		shared := false
		for _, r := range ts.Resources {
			if r.Replicas <= 1 {
				continue
			}
			shared = true
			base := "nvidia.com/gpu"
			if r.Name != "nvidia.com/gpu" {
				if !strings.HasPrefix(r.Name, Prefix) {
					continue
				}
				base = r.Name
			}
			if base == "nvidia.com/gpu" {
				l[Replicas] = strconv.Itoa(r.Replicas)
				if gpuconfig.SharedResourceName(r, ts.RenameByDefault) == r.Name {
					l[Product] = value(l[Product] + "-SHARED")
				}
			} else if _, ok := l[base+".count"]; ok {
				l[base+".replicas"] = strconv.Itoa(r.Replicas)
			}
		}
		if shared {
			l[SharingStrategy] = "time-slicing"
		}
	}
	if _, ok := l[Replicas]; !ok {
		l[Replicas] = "1"
	}
	return l
}

func orNone(s gpuconfig.MIGStrategy) gpuconfig.MIGStrategy {
	if s == "" {
		return gpuconfig.MIGStrategyNone
	}
	return s
}

// value makes s a valid label value: characters outside [A-Za-z0-9._-]
// become '-', non-alphanumeric ends are trimmed, and it is cut to 63 bytes.
func value(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	isAlnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for len(b) > 0 && !isAlnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !isAlnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}

// Keys returns the label keys, sorted.
func Keys(l map[string]string) []string {
	out := make([]string, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
