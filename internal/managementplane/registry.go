package managementplane

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/supervisor"
)

// RegistryName is the registry's component name in State.
const RegistryName = "registry"

// registryConfig is the registry's configuration: plain HTTP on loopback
// only (nodes reach it through the host's forwarding), filesystem storage
// under the data directory, deletes allowed (fke image rm, garbage collection).
func registryConfig(storage string, port int) []byte {
	return []byte(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: ` + strconv.Quote(storage) + `
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:` + strconv.Itoa(port) + `
  draintimeout: 2s
`)
}

// registrySpec is the supervised registry process of the data directory p.
func registrySpec(p Paths, bin string, port int) (supervisor.Spec, error) {
	if err := os.MkdirAll(p.Registry(), 0o700); err != nil {
		return supervisor.Spec{}, fmt.Errorf("creating registry storage: %w", err)
	}
	if err := os.WriteFile(p.RegistryConfig(), registryConfig(p.Registry(), port), 0o600); err != nil {
		return supervisor.Spec{}, fmt.Errorf("writing registry config: %w", err)
	}
	return supervisor.Spec{
		Name: RegistryName, Path: bin,
		Args: []string{"serve", p.RegistryConfig()},
		// No telemetry leaves the machine (the registry exports traces over
		// OTLP when asked to).
		Env:     append(os.Environ(), "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none"),
		LogPath: filepath.Join(p.Logs(), "registry.log"),
		// The API root answers "{}".
		Ready: supervisor.WaitHTTPOK("http://127.0.0.1:"+strconv.Itoa(port)+"/v2/", nil),
	}, nil
}

// pushSystemImages builds fke's images and pushes them to the registry at
// host; run in the background so that `fke up` does not wait for it.
func pushSystemImages(ctx context.Context, host string, finder binaries.Finder, log *slog.Logger) {
	pushed, err := image.EnsureSystemImages(ctx, image.Registry{Host: host}, finder, log)
	// The builds held their layers in memory (the binaries, tarred and
	// compressed): garbage the size of the images, which the daemon, as it
	// allocates little afterwards, would otherwise keep mapped for its
	// whole life (bench/README.md, "What the daemon keeps").
	debug.FreeOSMemory()
	if err != nil {
		log.Warn("some system images are not in the registry", "pushed", len(pushed), "error", err.Error())
		return
	}
	log.Info("system images in the registry", "count", len(pushed))
}
