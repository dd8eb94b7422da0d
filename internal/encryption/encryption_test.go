package encryption

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewIsValidAndRandom(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(a); err != nil {
		t.Fatalf("New() is not valid: %v\n%s", err, a)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if string(a) == string(b) {
		t.Error("two configurations share their key")
	}
	for _, want := range []string{"secretbox:", "identity: {}", "- secrets"} {
		if !strings.Contains(string(a), want) {
			t.Errorf("configuration lacks %q:\n%s", want, a)
		}
	}
	if strings.Index(string(a), "secretbox") > strings.Index(string(a), "identity") {
		t.Errorf("identity before secretbox: secrets would be stored in plain text\n%s", a)
	}
}

const key32 = "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=" // 32 bytes

func TestValidate(t *testing.T) {
	head := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"
	for _, tc := range []struct {
		name, data, wantErr string
	}{
		{"secretbox then identity", head + "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k, secret: " + key32 + "}]}\n  - identity: {}\n", ""},
		{"aescbc, two keys", head + "resources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: new, secret: " + key32 + "}, {name: old, secret: " + key32 + "}]}\n", ""},
		{"identity first", head + "resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  - secretbox: {keys: [{name: k, secret: " + key32 + "}]}\n", "not encrypted"},
		{"short key", head + "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k, secret: c2hvcnQ=}]}\n", `key "k" is not 32`},
		{"no keys", head + "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: []}\n", "no keys"},
		{"no secrets entry", head + "resources:\n- resources: [configmaps]\n  providers:\n  - secretbox: {keys: [{name: k, secret: " + key32 + "}]}\n", "no entry for secrets"},
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\n", "want EncryptionConfiguration"},
		{"unknown field", head + "resource: []\n", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate([]byte(tc.data))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestEnsure(t *testing.T) {
	made, changed, err := Ensure(nil)
	if err != nil || !changed || Validate(made) != nil {
		t.Fatalf("Ensure(nil) = changed %v, err %v", changed, err)
	}
	kept, changed, err := Ensure(made)
	if err != nil || changed || string(kept) != string(made) {
		t.Errorf("Ensure(valid) replaced it: changed %v, err %v", changed, err)
	}
	if _, _, err := Ensure([]byte("kind: nonsense\n")); err == nil {
		t.Error("Ensure(invalid) succeeded; it must never replace a key")
	}
}

func TestEnsureFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", ConfigFile)
	if err := EnsureFile(path); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := EnsureFile(path); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(path)
	if string(again) != string(first) {
		t.Error("EnsureFile replaced a valid configuration")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after EnsureFile, want 0600", fi.Mode().Perm())
	}
	if err := os.WriteFile(path, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := EnsureFile(path); err == nil || !strings.Contains(err.Error(), "fix or restore") {
		t.Errorf("EnsureFile(broken) = %v, want an error saying to fix or restore it", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "broken" {
		t.Error("EnsureFile replaced a broken configuration")
	}
}

func TestEncrypted(t *testing.T) {
	if !Encrypted([]byte("k8s:enc:secretbox:v1:key1:...")) || Encrypted([]byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret")) {
		t.Error("Encrypted misjudges a value")
	}
}
