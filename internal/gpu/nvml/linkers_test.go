package nvml

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTheAgentLinksNVML keeps NVML's bindings out of the binaries
// that do not talk to GPUs: they must resolve lazily (the driver library
// is loaded at run time), so a binary that also links Go's plugin package
// (kustomize's, in fke and fke-manager) would not start, and `go build
// ./cmd/...` without build tags would make such a binary.
func TestOnlyTheAgentLinksNVML(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "fke.dev/fke/cmd/fke", "fke.dev/fke/cmd/fke-manager").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/NVIDIA/go-nvml/") || p == "fke.dev/fke/internal/gpu/nvml" {
			t.Errorf("fke or fke-manager links %s: only fke-gpu-agent may (go list -deps shows the path)", p)
		}
	}
}
