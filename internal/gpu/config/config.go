// Package config is the configuration schema of the GPU node agent
// (fke-gpu-agent): how GPUs are discovered, advertised to the kubelet, shared,
// labelled, health-checked and exported as metrics.
//
// The same struct is read from the agent's YAML file and overridden by flags;
// Default returns a complete configuration and Validate reports every problem
// in one error.
package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// MIGStrategy says how MIG devices are advertised to the kubelet.
type MIGStrategy string

const (
	// MIGStrategyNone advertises whole GPUs only; MIG devices are not enumerated.
	MIGStrategyNone MIGStrategy = "none"
	// MIGStrategySingle advertises MIG devices as nvidia.com/gpu; every
	// MIG-enabled GPU must use one and the same profile.
	MIGStrategySingle MIGStrategy = "single"
	// MIGStrategyMixed advertises each MIG profile as nvidia.com/mig-<profile>
	// and GPUs without MIG as nvidia.com/gpu.
	MIGStrategyMixed MIGStrategy = "mixed"
)

// AllocationPolicy chooses GetPreferredAllocation's answer.
type AllocationPolicy string

const (
	// AllocationPacked keeps a request on as few physical GPUs as possible,
	// preferring the best-connected (NVLink, then NUMA) set.
	AllocationPacked AllocationPolicy = "packed"
	// AllocationSpread puts each requested device (e.g. shared replicas) on a
	// different physical GPU when it can.
	AllocationSpread AllocationPolicy = "spread"
)

// DeviceListStrategy says how allocated devices reach the container.
type DeviceListStrategy string

const (
	// DeviceListEnvvar sets NVIDIA_VISIBLE_DEVICES to the allocated UUIDs.
	DeviceListEnvvar DeviceListStrategy = "envvar"
	// DeviceListCDI returns CDI device names (nvidia.com/gpu=<uuid>).
	DeviceListCDI DeviceListStrategy = "cdi"
)

const (
	// BackendReal loads the NVIDIA driver's NVML library at run time.
	BackendReal = "real"
	// BackendMockPrefix selects one of go-nvml's mock servers, e.g. "mock:dgxh100".
	BackendMockPrefix = "mock:"
	// DefaultPluginDir is the kubelet's device-plugin directory.
	DefaultPluginDir = "/var/lib/kubelet/device-plugins/"
	// DefaultCDISpecDir is the runtimes' CDI spec directory for generated specs.
	DefaultCDISpecDir = "/var/run/cdi"
	// DefaultPodResourcesSocket is the kubelet's pod-resources API socket.
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
)

// MockBackends lists the mock servers accepted after "mock:".
var MockBackends = []string{"dgxa100", "dgxh100", "dgxh200", "dgxb200"}

// Config is the whole agent configuration.
type Config struct {
	// Backend is "real" or "mock:<dgxa100|dgxh100|dgxh200|dgxb200>".
	Backend string `json:"backend"`
	// NodeName is this node's name (defaults to $NODE_NAME).
	NodeName string `json:"nodeName"`
	// Machine is the value of nvidia.com/gpu.machine (defaults to the DMI product name).
	Machine string `json:"machine,omitempty"`

	DevicePlugin DevicePlugin `json:"devicePlugin"`
	MIGStrategy  MIGStrategy  `json:"migStrategy"`
	Sharing      Sharing      `json:"sharing"`
	Health       Health       `json:"health"`
	Metrics      Metrics      `json:"metrics"`
	// Labels enables patching this node's nvidia.com/ labels.
	Labels Labels `json:"labels"`
	// Mock configures the mock backend (ignored for "real").
	Mock Mock `json:"mock,omitempty"`
}

// DevicePlugin configures the kubelet device-plugin servers.
type DevicePlugin struct {
	// Enabled serves the device plugin; false runs discovery, health and metrics only.
	Enabled bool `json:"enabled"`
	// Dir is the kubelet device-plugin directory holding kubelet.sock and our sockets.
	Dir string `json:"dir"`
	// AllocationPolicy is packed or spread.
	AllocationPolicy AllocationPolicy `json:"allocationPolicy"`
	// DeviceListStrategy is envvar or cdi.
	DeviceListStrategy DeviceListStrategy `json:"deviceListStrategy"`
	// DriverRoot is where the agent sees the host's root filesystem, to find
	// the driver's device nodes and libraries: "/" on the host, the mount
	// of the host's / when the agent runs in a container.
	DriverRoot string `json:"driverRoot"`
	// CDISpecDir is where the cdi strategy writes the CDI spec of the GPUs
	// (the runtime's CDI directory, as the agent sees it).
	CDISpecDir string `json:"cdiSpecDir"`
	// SelfCheckInterval is how often the advertised devices are compared with
	// the Node's allocatable; 0 disables the check.
	SelfCheckInterval metav1.Duration `json:"selfCheckInterval"`
}

// Sharing configures GPU sharing.
type Sharing struct {
	TimeSlicing *TimeSlicing `json:"timeSlicing,omitempty"`
}

// TimeSlicing advertises each device of a resource Replicas times.
type TimeSlicing struct {
	// RenameByDefault advertises shared resources as <name>.shared.
	RenameByDefault bool `json:"renameByDefault,omitempty"`
	// FailRequestsGreaterThanOne rejects Allocate of more than one replica.
	FailRequestsGreaterThanOne bool `json:"failRequestsGreaterThanOne,omitempty"`
	// Resources lists the resources to share.
	Resources []ReplicatedResource `json:"resources"`
}

// ReplicatedResource is one shared resource.
type ReplicatedResource struct {
	// Name is the resource to share, e.g. nvidia.com/gpu or nvidia.com/mig-1g.10gb.
	Name string `json:"name"`
	// Rename is the advertised name; a name without "/" is put under nvidia.com/.
	Rename string `json:"rename,omitempty"`
	// Replicas is the number of replicas per device (≥ 2 to share).
	Replicas int `json:"replicas"`
}

// Health configures the XID health monitor.
type Health struct {
	// Disabled turns the monitor off; every device stays Healthy.
	Disabled bool `json:"disabled,omitempty"`
	// ProbeInterval is how often an unhealthy device is re-probed.
	ProbeInterval metav1.Duration `json:"probeInterval"`
	// RecoveryHold is the minimum time a device stays unhealthy after its last critical event.
	RecoveryHold metav1.Duration `json:"recoveryHold"`
	// IgnoredXIDs are added to the policy's application-level XIDs.
	IgnoredXIDs []uint64 `json:"ignoredXIDs,omitempty"`
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Address to listen on, e.g. ":9400"; empty disables the endpoint.
	Address string `json:"address"`
	// PodResourcesSocket is the kubelet pod-resources socket; empty disables pod attribution.
	PodResourcesSocket string `json:"podResourcesSocket"`
	// PodResourcesTTL is how long pod-resources answers are reused.
	PodResourcesTTL metav1.Duration `json:"podResourcesTTL"`
}

// Labels configures the node labeler.
type Labels struct {
	Enabled bool `json:"enabled"`
	// Interval is how often labels are re-applied; 0 applies them once.
	Interval metav1.Duration `json:"interval"`
}

// Mock configures the mock backend.
type Mock struct {
	// MIG maps a GPU index ("0".."7") to the MIG profiles created on it
	// (e.g. ["1g.10gb", "3g.40gb"]); those GPUs get MIG mode enabled.
	MIG map[string][]string `json:"mig,omitempty"`
}

// Default returns the configuration used when no file or flag says otherwise.
func Default() Config {
	return Config{
		Backend:  BackendReal,
		NodeName: os.Getenv("NODE_NAME"),
		DevicePlugin: DevicePlugin{
			Enabled:            true,
			Dir:                DefaultPluginDir,
			AllocationPolicy:   AllocationPacked,
			DeviceListStrategy: DeviceListEnvvar,
			DriverRoot:         "/",
			CDISpecDir:         DefaultCDISpecDir,
			SelfCheckInterval:  metav1.Duration{Duration: 30 * time.Second},
		},
		MIGStrategy: MIGStrategyNone,
		Health: Health{
			ProbeInterval: metav1.Duration{Duration: 30 * time.Second},
			RecoveryHold:  metav1.Duration{Duration: 2 * time.Minute},
		},
		Metrics: Metrics{
			Address:            ":9400",
			PodResourcesSocket: DefaultPodResourcesSocket,
			PodResourcesTTL:    metav1.Duration{Duration: 5 * time.Second},
		},
		Labels: Labels{Enabled: true, Interval: metav1.Duration{Duration: 5 * time.Minute}},
	}
}

// Load reads a YAML file over Default(); unknown fields are an error.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Default(), fmt.Errorf("reading config %s: %w", path, err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return cfg, fmt.Errorf("parsing config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse reads YAML over Default(); unknown fields are an error.
func Parse(data []byte) (Config, error) {
	cfg := Default()
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// MockName returns the mock server name for "mock:<name>" and whether the backend is a mock.
func (c Config) MockName() (string, bool) {
	name, ok := strings.CutPrefix(c.Backend, BackendMockPrefix)
	return name, ok
}

// Validate reports every invalid field in one error.
func (c Config) Validate() error {
	var errs []error
	if name, ok := c.MockName(); ok {
		if !contains(MockBackends, name) {
			errs = append(errs, fmt.Errorf("backend %q: unknown mock %q (one of %s)", c.Backend, name, strings.Join(MockBackends, ", ")))
		}
	} else if c.Backend != BackendReal {
		errs = append(errs, fmt.Errorf("backend %q: must be %q or %q<%s>", c.Backend, BackendReal, BackendMockPrefix, strings.Join(MockBackends, "|")))
	}
	switch c.MIGStrategy {
	case MIGStrategyNone, MIGStrategySingle, MIGStrategyMixed:
	default:
		errs = append(errs, fmt.Errorf("migStrategy %q: must be none, single or mixed", c.MIGStrategy))
	}
	switch c.DevicePlugin.AllocationPolicy {
	case AllocationPacked, AllocationSpread:
	default:
		errs = append(errs, fmt.Errorf("devicePlugin.allocationPolicy %q: must be packed or spread", c.DevicePlugin.AllocationPolicy))
	}
	switch c.DevicePlugin.DeviceListStrategy {
	case DeviceListEnvvar, DeviceListCDI:
	default:
		errs = append(errs, fmt.Errorf("devicePlugin.deviceListStrategy %q: must be envvar or cdi", c.DevicePlugin.DeviceListStrategy))
	}
	if !strings.HasPrefix(c.DevicePlugin.DriverRoot, "/") {
		errs = append(errs, fmt.Errorf("devicePlugin.driverRoot %q: must be an absolute path", c.DevicePlugin.DriverRoot))
	}
	if c.DevicePlugin.DeviceListStrategy == DeviceListCDI && !strings.HasPrefix(c.DevicePlugin.CDISpecDir, "/") {
		errs = append(errs, fmt.Errorf("devicePlugin.cdiSpecDir %q: must be an absolute path with the cdi strategy", c.DevicePlugin.CDISpecDir))
	}
	if c.DevicePlugin.Enabled && c.DevicePlugin.Dir == "" {
		errs = append(errs, errors.New("devicePlugin.dir: must be set when the device plugin is enabled"))
	}
	if ts := c.Sharing.TimeSlicing; ts != nil {
		seen := map[string]bool{}
		for i, r := range ts.Resources {
			if r.Name == "" {
				errs = append(errs, fmt.Errorf("sharing.timeSlicing.resources[%d].name: must be set", i))
			}
			if seen[r.Name] {
				errs = append(errs, fmt.Errorf("sharing.timeSlicing.resources[%d].name %q: listed twice", i, r.Name))
			}
			seen[r.Name] = true
			if r.Replicas < 1 {
				errs = append(errs, fmt.Errorf("sharing.timeSlicing.resources[%d].replicas %d: must be ≥ 1", i, r.Replicas))
			}
		}
	}
	if !c.Health.Disabled && c.Health.ProbeInterval.Duration <= 0 {
		errs = append(errs, errors.New("health.probeInterval: must be > 0"))
	}
	for _, d := range []struct {
		name string
		d    metav1.Duration
	}{
		{"devicePlugin.selfCheckInterval", c.DevicePlugin.SelfCheckInterval},
		{"health.recoveryHold", c.Health.RecoveryHold},
		{"metrics.podResourcesTTL", c.Metrics.PodResourcesTTL},
		{"labels.interval", c.Labels.Interval},
	} {
		if d.d.Duration < 0 {
			errs = append(errs, fmt.Errorf("%s %s: must not be negative", d.name, d.d.Duration))
		}
	}
	if c.Labels.Enabled && c.NodeName == "" {
		errs = append(errs, errors.New("nodeName: must be set (flag --node-name or $NODE_NAME) when labels are enabled"))
	}
	return errors.Join(errs...)
}

// SharedResourceName returns the advertised name of a shared resource.
func SharedResourceName(r ReplicatedResource, renameByDefault bool) string {
	switch {
	case r.Rename != "" && strings.Contains(r.Rename, "/"):
		return r.Rename
	case r.Rename != "":
		return "nvidia.com/" + r.Rename
	case renameByDefault && r.Replicas > 1:
		return r.Name + ".shared"
	default:
		return r.Name
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
