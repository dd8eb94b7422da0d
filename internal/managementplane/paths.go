// Package managementplane runs the local management plane behind `fke up`: a
// background daemon that supervises the management etcd, kube-apiserver and
// fke-manager, installs the fke.dev CRDs and writes the management kubeconfig.
package managementplane

import (
	"os"
	"path/filepath"

	"fke.dev/fke/internal/encryption"
)

// EnvHome overrides the default data directory.
const EnvHome = "FKE_HOME"

// DefaultDataDir returns $FKE_HOME, or ~/.fke.
func DefaultDataDir() string {
	if d := os.Getenv(EnvHome); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ".fke"
	}
	return filepath.Join(home, ".fke")
}

// Paths names the files of a data directory.
type Paths struct{ Dir string }

// Kubeconfig is the admin kubeconfig of the management API.
func (p Paths) Kubeconfig() string { return filepath.Join(p.Dir, "management.kubeconfig") }

// State is the daemon's state file (JSON, see State).
func (p Paths) State() string { return filepath.Join(p.Dir, "state.json") }

// Lock is held by the running daemon.
func (p Paths) Lock() string { return filepath.Join(p.Dir, "daemon.lock") }

// Logs holds the daemon's and the management components' logs.
func (p Paths) Logs() string { return filepath.Join(p.Dir, "logs") }

// DaemonLog is the daemon's own log.
func (p Paths) DaemonLog() string { return filepath.Join(p.Logs(), "daemon.log") }

// PKI holds the management plane's certificates.
func (p Paths) PKI() string { return filepath.Join(p.Dir, "pki") }

// WebhookPKI holds the CA and serving certificate of fke-manager's
// admission webhook.
func (p Paths) WebhookPKI() string { return filepath.Join(p.Dir, "webhook-pki") }

// Etcd holds the management etcd's data.
func (p Paths) Etcd() string { return filepath.Join(p.Dir, "etcd") }

// Ports records the management plane's ports across restarts.
func (p Paths) Ports() string { return filepath.Join(p.Dir, "ports.json") }

// EncryptionConfig is the management kube-apiserver's encryption
// configuration (--encryption-provider-config): the key of the Secrets in the
// management etcd, tenants' PKI and their encryption keys included. It lives
// beside etcd's data, not in it, and goes with `fke down --purge`.
func (p Paths) EncryptionConfig() string { return filepath.Join(p.Dir, encryption.ConfigFile) }

// HolderSocket is where the daemon holds the processes of tenant control
// planes for fke-manager (see supervisor.Holder).
func (p Paths) HolderSocket() string { return filepath.Join(p.Dir, "run", "holder.sock") }

// Registry holds the OCI registry's storage.
func (p Paths) Registry() string { return filepath.Join(p.Dir, "registry") }

// RegistryConfig is the OCI registry's configuration file.
func (p Paths) RegistryConfig() string { return filepath.Join(p.Dir, "registry.yml") }
