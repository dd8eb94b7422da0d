package deviceplugin

import (
	"fmt"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"fke.dev/fke/internal/gpu/config"
)

const (
	// VisibleDevicesEnv lists the GPUs a container may use (NVIDIA container toolkit).
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
	// CDIKind is the CDI vendor/class of GPU devices.
	CDIKind = "nvidia.com/gpu"
)

// ContainerResponse decides what one container gets for the device IDs the
// kubelet allocated: their UUIDs (replicas of one GPU collapse to that GPU),
// in NVIDIA_VISIBLE_DEVICES or as CDI device names nvidia.com/gpu=<uuid>.
func ContainerResponse(res Resource, byID map[string]Device, ids []string, strategy config.DeviceListStrategy) (*pluginapi.ContainerAllocateResponse, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("allocating %s: no devices requested", res.Name)
	}
	if res.Shared() && res.FailRequestsGreaterThanOne && len(ids) > 1 {
		return nil, fmt.Errorf("allocating %s: request for %d shared devices rejected (failRequestsGreaterThanOne is set; request 1)", res.Name, len(ids))
	}
	var uuids []string
	seen := map[string]bool{}
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("allocating %s: unknown device %q", res.Name, id)
		}
		if !seen[d.UUID] {
			seen[d.UUID] = true
			uuids = append(uuids, d.UUID)
		}
	}
	resp := &pluginapi.ContainerAllocateResponse{}
	switch strategy {
	case config.DeviceListEnvvar, "":
		resp.Envs = map[string]string{VisibleDevicesEnv: strings.Join(uuids, ",")}
	case config.DeviceListCDI:
		for _, u := range uuids {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: CDIKind + "=" + u})
		}
	default:
		return nil, fmt.Errorf("unknown device list strategy %q", strategy)
	}
	return resp, nil
}
