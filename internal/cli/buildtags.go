//go:build !kustomize_disable_go_plugin_support

package cli

// fke's command line must be built (and its tests run) with
// -tags kustomize_disable_go_plugin_support; `make` sets it through GOFLAGS.
// Without the tag, kustomize links Go's plugin package, the linker then
// binds every symbol at start-up, and the NVML bindings (resolved only once
// libnvidia-ml is loaded) stop the binary before main with "undefined
// symbol: nvml...". This line turns that into a build error naming the fix:
// go build -tags kustomize_disable_go_plugin_support ./cmd/fke
var _ = build_with_tags_kustomize_disable_go_plugin_support
