package deviceplugin

import (
	"fmt"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/driver"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// VisibleDevicesEnv lists the GPUs a container may use (NVIDIA container toolkit).
const VisibleDevicesEnv = driver.VisibleDevicesEnv

// ContainerResponse decides what one container gets for the device IDs the
// kubelet allocated. Replicas of one GPU collapse to that GPU. With the
// envvar strategy the container gets what drv.Edits gives for those GPUs:
// their device nodes, the driver's control nodes, libraries and tools
// (read-only), and NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES; a
// simulated driver (nil or without device nodes) gives the variables only.
// With the cdi strategy it gets the CDI names nvidia.com/gpu=<uuid>, which
// a CDI-enabled runtime resolves through the spec the agent writes.
func ContainerResponse(res Resource, byID map[string]Device, ids []string, strategy gpuconfig.DeviceListStrategy, drv *driver.Driver) (*pluginapi.ContainerAllocateResponse, error) {
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
	case gpuconfig.DeviceListEnvvar, "":
		e := drv.Edits(uuids)
		resp.Envs = e.Env
		for _, n := range e.DeviceNodes {
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: n, HostPath: n, Permissions: "rw"})
		}
		for _, m := range e.Mounts {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: true})
		}
	case gpuconfig.DeviceListCDI:
		for _, u := range uuids {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: driver.CDIName(u)})
		}
	default:
		return nil, fmt.Errorf("unknown device list strategy %q", strategy)
	}
	return resp, nil
}
