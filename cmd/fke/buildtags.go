//go:build !kustomize_disable_go_plugin_support

package main

// fke must be built with -tags kustomize_disable_go_plugin_support (`make
// build` and the tests set it). Without the tag, kustomize links Go's
// plugin package, the linker then binds every symbol at start-up, and the
// NVML bindings (resolved only once libnvidia-ml is loaded) stop the
// binary before main with "undefined symbol: nvml...". This line turns that
// into a build error that names the fix.
var _ = build_fke_with_tags_kustomize_disable_go_plugin_support
