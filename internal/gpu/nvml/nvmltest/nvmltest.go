// Package nvmltest helps tests that need the real NVML.
package nvmltest

import (
	"errors"
	"testing"

	"fke.dev/fke/internal/gpu/nvml"
)

// Real opens the real NVML and closes it when the test ends; it skips the
// test where no NVIDIA driver is installed.
func Real(t testing.TB) nvml.Interface {
	t.Helper()
	lib, err := nvml.NewReal("")
	if err != nil {
		var nd *nvml.ErrNoDriver
		if errors.As(err, &nd) {
			t.Skipf("no NVIDIA driver here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { lib.Close() })
	return lib
}
