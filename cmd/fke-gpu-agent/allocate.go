package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/deviceplugin"
	"fke.dev/fke/internal/gpu/driver"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// allocation is what `allocate` prints: the devices chosen and the answer
// the device plugin gives the kubelet for a container allocated them.
type allocation struct {
	Resource string                               `json:"resource"`
	Devices  []string                             `json:"devices"`
	Response *pluginapi.ContainerAllocateResponse `json:"response"`
}

// printAllocation answers, without a kubelet, what the device plugin would
// answer for one container given count devices of the first resource
// (nvidia.com/gpu unless MIG or sharing rename it), chosen by the
// configured policy. hack/gpu-check.sh builds an OCI bundle from it.
func printAllocation(ctx context.Context, w io.Writer, cfg gpuconfig.Config, count int) error {
	if count < 1 {
		return fmt.Errorf("--count %d: must be at least 1", count)
	}
	lib, _, devs, err := discover(ctx, cfg)
	if err != nil {
		return err
	}
	defer lib.Close()
	drv := &driver.Driver{}
	if _, mock := cfg.MockName(); !mock {
		if drv, err = driver.Discover(cfg.DevicePlugin.DriverRoot, devs); err != nil {
			return fmt.Errorf("finding the driver's files: %w", err)
		}
	}
	res, err := deviceplugin.BuildResources(devs, cfg.MIGStrategy, cfg.Sharing.TimeSlicing)
	if err != nil {
		return err
	}
	if len(res) == 0 || len(res[0].Devices) < count {
		return fmt.Errorf("asked for %d devices; this node advertises %d", count, len(devs))
	}
	r := res[0]
	byID := map[string]deviceplugin.Device{}
	var available []string
	for _, d := range r.Devices {
		byID[d.ID] = d
		available = append(available, d.ID)
	}
	ids, err := deviceplugin.Preferred(cfg.DevicePlugin.AllocationPolicy, byID, deviceplugin.TopologyOf(devs), deviceplugin.Request{Available: available, Size: count})
	if err != nil {
		return err
	}
	resp, err := deviceplugin.ContainerResponse(r, byID, ids, cfg.DevicePlugin.DeviceListStrategy, drv)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(allocation{Resource: r.Name, Devices: ids, Response: resp})
}
