package nvml

import (
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver wraps the error returned when NVML cannot be loaded or initialised.
type ErrNoDriver struct{ Err error }

func (e *ErrNoDriver) Error() string {
	return fmt.Sprintf("NVML is not available (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?): %v", e.Err)
}

func (e *ErrNoDriver) Unwrap() error { return e.Err }

// NewReal loads libnvidia-ml at run time and initialises it: the library at
// libraryPath, or libnvidia-ml.so.1 from the loader's search path when it is
// empty. Without a driver it returns an *ErrNoDriver; it never crashes the
// process.
func NewReal(libraryPath string) (Interface, error) {
	var opts []gonvml.LibraryOption
	if libraryPath != "" {
		opts = append(opts, gonvml.WithLibraryPath(libraryPath))
	}
	lib := gonvml.New(opts...)
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		return nil, &ErrNoDriver{Err: ret}
	}
	return &adapter{lib: lib, profileName: realProfileName}, nil
}

// realProfileName asks the driver for the GPU instance profile's name and
// falls back to deriving it from slices and memory.
func realProfileName(parent, mig gonvml.Device, attrs gonvml.DeviceAttributes) string {
	fallback := MIGProfileName(int(attrs.GpuInstanceSliceCount), int(attrs.ComputeInstanceSliceCount), attrs.MemorySizeMB)
	giID, ret := mig.GetGpuInstanceId()
	if ret != gonvml.SUCCESS {
		return fallback
	}
	gi, ret := parent.GetGpuInstanceById(giID)
	if ret != gonvml.SUCCESS {
		return fallback
	}
	info, ret := gi.GetInfo()
	if ret != gonvml.SUCCESS {
		return fallback
	}
	v3, ret := parent.GetGpuInstanceProfileInfoV(int(info.ProfileId)).V3()
	if ret != gonvml.SUCCESS {
		return fallback
	}
	name := cString(v3.Name[:])
	if len(name) > 4 && name[:4] == "MIG " {
		name = name[4:]
	}
	if name == "" {
		return fallback
	}
	if attrs.ComputeInstanceSliceCount > 0 && attrs.ComputeInstanceSliceCount < attrs.GpuInstanceSliceCount {
		name = fmt.Sprintf("%dc.%s", attrs.ComputeInstanceSliceCount, name)
	}
	return name
}
