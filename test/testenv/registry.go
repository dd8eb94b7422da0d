package testenv

import (
	"fmt"
	"net"
	"strings"
	"time"

	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/image"
)

// WaitSystemImages waits until `fke up` has pushed fke's system images
// (image.SystemImages) to its registry, and returns the registry's address
// as nodes reach it (the host bridge's gateway).
func (e *Env) WaitSystemImages() string {
	e.T.Helper()
	_, port, ok := strings.Cut(e.State().Registry, ":")
	if !ok {
		e.T.Fatalf("fke up runs no registry: %s", e.State().RegistryError)
	}
	Eventually(e.T, 2*time.Minute, "system images in the registry", func() error {
		out, err := e.Run("image", "list")
		if err != nil {
			return err
		}
		for _, si := range image.SystemImages {
			if !strings.Contains(out, si.Name) {
				return fmt.Errorf("no %s in:\n%s", si.Name, out)
			}
		}
		return nil
	})
	return net.JoinHostPort(hostnet.Gateway.String(), port)
}
