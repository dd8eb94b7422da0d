// Package encryption makes the configuration kube-apiserver reads with
// --encryption-provider-config, so that Secrets are encrypted at rest in
// etcd: secretbox (XSalsa20-Poly1305) with a random 32-byte key, then the
// identity provider so that Secrets written before encryption was turned on
// stay readable (they are encrypted when next written).
//
// A configuration is made once per installation (the management API server)
// or per cluster (a tenant API server) and kept afterwards: Ensure never
// replaces a usable one, so an operator's rotation edits survive.
package encryption

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// ConfigFile is the file name of a configuration beside the other key
// material (a tenant's PKI bundle, the management plane's data directory).
const ConfigFile = "encryption-config.yaml"

// KeySize is the size of a secretbox or aescbc key (AES-256).
const KeySize = 32

// Prefix starts every value kube-apiserver stores encrypted in etcd
// (k8s:enc:<provider>:v1:<key name>:...).
const Prefix = "k8s:enc:"

// keyName names the first key; rotation adds keys with other names.
const keyName = "key1"

// Config is the part of apiserver.config.k8s.io/v1 EncryptionConfiguration
// fke reads and writes.
type Config struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Resources  []Resource `json:"resources"`
}

// Resource lists the providers of some resources, the first one encrypting.
type Resource struct {
	Resources []string   `json:"resources"`
	Providers []Provider `json:"providers"`
}

// Provider is one entry of Resource.Providers; exactly one field is set.
type Provider struct {
	Secretbox *KeyList  `json:"secretbox,omitempty"`
	AESCBC    *KeyList  `json:"aescbc,omitempty"`
	Identity  *struct{} `json:"identity,omitempty"`
}

// KeyList is the keys of a secretbox or aescbc provider, the first one
// encrypting, every one decrypting.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Key is a named base64-encoded key.
type Key struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// New returns a new configuration that encrypts Secrets with secretbox
// under a fresh random key.
func New() ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating encryption key: %w", err)
	}
	cfg := Config{
		APIVersion: "apiserver.config.k8s.io/v1",
		Kind:       "EncryptionConfiguration",
		Resources: []Resource{{
			Resources: []string{"secrets"},
			Providers: []Provider{
				{Secretbox: &KeyList{Keys: []Key{{Name: keyName, Secret: base64.StdEncoding.EncodeToString(key)}}}},
				{Identity: &struct{}{}},
			},
		}},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering encryption configuration: %w", err)
	}
	return data, nil
}

// Validate returns an error unless data is an EncryptionConfiguration whose
// Secrets are encrypted (the first provider of "secrets" is secretbox or
// aescbc) and whose every key decodes to KeySize bytes.
func Validate(data []byte) error {
	var cfg Config
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return fmt.Errorf("encryption configuration: %w", err)
	}
	if cfg.Kind != "EncryptionConfiguration" || cfg.APIVersion != "apiserver.config.k8s.io/v1" {
		return fmt.Errorf("encryption configuration: kind %q apiVersion %q, want EncryptionConfiguration apiserver.config.k8s.io/v1", cfg.Kind, cfg.APIVersion)
	}
	for _, r := range cfg.Resources {
		for _, p := range r.Providers {
			for _, list := range []*KeyList{p.Secretbox, p.AESCBC} {
				if list == nil {
					continue
				}
				if len(list.Keys) == 0 {
					return errors.New("encryption configuration: a provider has no keys")
				}
				for _, k := range list.Keys {
					raw, err := base64.StdEncoding.DecodeString(k.Secret)
					if err != nil || len(raw) != KeySize {
						return fmt.Errorf("encryption configuration: key %q is not %d base64-encoded bytes", k.Name, KeySize)
					}
				}
			}
		}
		for _, res := range r.Resources {
			if res != "secrets" {
				continue
			}
			if len(r.Providers) == 0 || (r.Providers[0].Secretbox == nil && r.Providers[0].AESCBC == nil) {
				return errors.New("encryption configuration: secrets are not encrypted (the first provider must be secretbox or aescbc)")
			}
			return nil
		}
	}
	return errors.New("encryption configuration: no entry for secrets")
}

// Ensure returns existing when it is a valid configuration and a new one
// when existing is empty; changed reports a new one. An existing
// configuration that is not valid is an error, never replaced: it may hold
// the only copy of the key the stored Secrets need.
func Ensure(existing []byte) (data []byte, changed bool, err error) {
	if len(existing) > 0 {
		if err := Validate(existing); err != nil {
			return nil, false, err
		}
		return existing, false, nil
	}
	data, err = New()
	return data, err == nil, err
}

// EnsureFile keeps a valid configuration at path (mode 0600) and makes one
// when the file is missing. A file that exists but is not valid is an error,
// never replaced: it may hold the only copy of a key the data needs.
func EnsureFile(path string) error {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := Validate(data); err != nil {
			return fmt.Errorf("%s: %w (fix or restore it; replacing it would lose the key of the stored Secrets)", path, err)
		}
		return os.Chmod(path, 0o600)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("reading %s: %w", path, err)
	}
	data, err = New()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Encrypted reports whether raw, a value read straight from etcd, is stored
// encrypted by kube-apiserver.
func Encrypted(raw []byte) bool { return bytes.HasPrefix(raw, []byte(Prefix)) }
