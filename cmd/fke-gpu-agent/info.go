package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/hostlib"
	"fke.dev/fke/internal/gpu/nvml"
)

type infoDoc struct {
	Backend string        `json:"backend"`
	System  nvml.System   `json:"system"`
	Devices []nvml.Device `json:"devices"`
}

func printInfo(ctx context.Context, w io.Writer, cfg gpuconfig.Config, output string) error {
	if output != "json" && output != "table" {
		return fmt.Errorf("-o %q: must be json or table", output)
	}
	lib, sys, devs, err := discover(ctx, cfg)
	if err != nil {
		return err
	}
	defer lib.Close()
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if devs == nil {
			devs = []nvml.Device{}
		}
		return enc.Encode(infoDoc{Backend: cfg.Backend, System: sys, Devices: devs})
	}
	major, minor := sys.CUDAVersion()
	fmt.Fprintf(w, "Driver %s, CUDA %d.%d, backend %s\n", sys.DriverVersion, major, minor, cfg.Backend)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tUUID\tNAME\tMEMORY(MiB)\tCC\tFAMILY\tNUMA\tNVLINK PEERS\tMIG")
	for _, d := range devs {
		mig := "n/a"
		if d.MIGCapable {
			mig = "disabled"
		}
		if d.MIGEnabled {
			mig = fmt.Sprintf("enabled (%d devices)", len(d.MIGDevices))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d.%d\t%s\t%d\t%d\t%s\n", d.Index, d.UUID, d.Name, d.MemoryMiB, d.ComputeMajor, d.ComputeMinor, d.Family, d.NUMANode, len(d.NVLinkPeers), mig)
		for _, m := range d.MIGDevices {
			fmt.Fprintf(tw, "  %d/%d\t%s\tMIG %s\t%d\t\t\t\t\t\n", d.Index, m.GPUInstanceID, m.UUID, m.Profile, m.MemoryMiB)
		}
	}
	return tw.Flush()
}

// discover opens the configured NVML backend and reads the system and its
// GPUs. The caller closes lib.
func discover(ctx context.Context, cfg gpuconfig.Config) (lib nvml.Interface, sys nvml.System, devs []nvml.Device, err error) {
	mig, err := mockMIG(cfg)
	if err != nil {
		return nil, sys, nil, err
	}
	if _, isMock := cfg.MockName(); !isMock && cfg.DevicePlugin.DriverRoot != "/" {
		// In a container: load the host's NVML from where the host is mounted.
		path, perr := hostlib.LibraryPath(cfg.DevicePlugin.DriverRoot, "libnvidia-ml.so.1")
		if perr != nil {
			return nil, sys, nil, &nvml.ErrNoDriver{Err: perr}
		}
		lib, err = nvml.NewReal(path)
	} else {
		lib, err = nvml.Open(ctx, cfg.Backend, cfg.NodeName, mig)
	}
	if err != nil {
		return nil, sys, nil, fmt.Errorf("opening NVML backend %s: %w", cfg.Backend, err)
	}
	if sys, err = lib.System(ctx); err != nil {
		lib.Close()
		return nil, sys, nil, fmt.Errorf("reading system info: %w", err)
	}
	if devs, err = lib.Devices(ctx); err != nil {
		lib.Close()
		return nil, sys, nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	return lib, sys, devs, nil
}
