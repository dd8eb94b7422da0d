package driver

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	cdi "tags.cncf.io/container-device-interface/specs-go"
)

// CDIKind is the CDI vendor/class of fke's GPU devices; a device is named
// nvidia.com/gpu=<GPU or MIG UUID>.
const CDIKind = "nvidia.com/gpu"

// CDISpecFile is the spec's file name in the CDI directory (/var/run/cdi).
const CDISpecFile = "fke.dev-nvidia-gpu.json"

// CDIName is the fully qualified CDI name of the device with uuid.
func CDIName(uuid string) string { return CDIKind + "=" + uuid }

// CDISpec describes d's devices (GPUs and MIG devices with device nodes,
// named by UUID) as a CDI spec: each device adds its nodes; every container
// with one of them gets the control nodes, libraries and tools. Nil for a
// simulated driver.
func (d *Driver) CDISpec() (*cdi.Spec, error) {
	if d.Simulated() {
		return nil, nil
	}
	spec := &cdi.Spec{Kind: CDIKind}
	for _, u := range slices.Sorted(maps.Keys(d.Nodes)) {
		nodes := d.Nodes[u]
		dev := cdi.Device{Name: u}
		for _, n := range nodes {
			dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, &cdi.DeviceNode{Path: n})
		}
		spec.Devices = append(spec.Devices, dev)
	}
	for _, n := range d.Control {
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, &cdi.DeviceNode{Path: n})
	}
	for _, m := range slices.Concat(d.Libraries, d.Tools) {
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &cdi.Mount{
			HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: []string{"ro", "nosuid", "nodev", "bind"},
		})
	}
	v, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = v
	return spec, nil
}

// WriteCDISpec writes spec into dir (atomically), or removes fke's spec
// there when spec is nil.
func WriteCDISpec(dir string, spec *cdi.Spec) error {
	path := filepath.Join(dir, CDISpecFile)
	if spec == nil {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing CDI spec: %w", err)
		}
		return nil
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating CDI directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing CDI spec: %w", err)
	}
	return nil
}
