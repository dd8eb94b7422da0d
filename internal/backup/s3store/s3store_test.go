package s3store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/backup/storetest"
	"fke.dev/fke/test/s3server"
)

// These tests talk HTTP to a real S3-protocol server on 127.0.0.1
// (gofakes3 behind a Signature V4 check, test/s3server).

func newStore(t *testing.T, srv *s3server.Server, mutate func(*Config)) *Store {
	t.Helper()
	cfg := Config{Endpoint: srv.URL, Bucket: "snapshots", AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey, MaxRetries: 1}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3StoreKeepsTheContract(t *testing.T) {
	srv := s3server.Start(t, "snapshots")
	storetest.Run(t, newStore(t, srv, nil))
}

func TestS3StoreOverTLS(t *testing.T) {
	srv := s3server.StartTLS(t, "snapshots")
	ctx := context.Background()
	put := func(s *Store) error { return s.Put(ctx, "k", strings.NewReader("v"), 1) }
	if err := put(newStore(t, srv, nil)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate of an unknown CA: %v", err)
	}
	if err := put(newStore(t, srv, func(c *Config) { c.CABundle = srv.CACert })); err != nil {
		t.Errorf("with the CA bundle: %v", err)
	}
	if err := put(newStore(t, srv, func(c *Config) { c.InsecureSkipTLSVerify = true })); err != nil {
		t.Errorf("not checking the certificate: %v", err)
	}
}

func TestS3StoreRefusals(t *testing.T) {
	srv := s3server.Start(t, "snapshots")
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
		auth   bool
	}{
		{"wrong secret key", func(c *Config) { c.SecretAccessKey = "wrong" }, "SignatureDoesNotMatch", true},
		{"unknown access key", func(c *Config) { c.AccessKeyID = "AKIAOTHER" }, "InvalidAccessKeyId", true},
		{"missing bucket", func(c *Config) { c.Bucket = "nope" }, "bucket nope does not exist", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, srv, tc.mutate)
			err := s.Put(ctx, "k", strings.NewReader("v"), 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Put: %v, want %q", err, tc.want)
			}
			if _, err := s.List(ctx, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("List: %v, want %q", err, tc.want)
			}
			if _, err := s.Get(ctx, "k"); tc.auth && (err == nil || errors.Is(err, backup.ErrNotFound) || !strings.Contains(err.Error(), "refused the credentials")) {
				t.Errorf("Get: %v, want a refusal", err)
			}
		})
	}
	for _, bad := range []Config{
		{Endpoint: "ftp://x", Bucket: "b", AccessKeyID: "a", SecretAccessKey: "s"},
		{Endpoint: "http://x/path", Bucket: "b", AccessKeyID: "a", SecretAccessKey: "s"},
		{Endpoint: "http://x", AccessKeyID: "a", SecretAccessKey: "s"},
		{Endpoint: "http://x", Bucket: "b"},
		{Endpoint: "https://x", Bucket: "b", AccessKeyID: "a", SecretAccessKey: "s", CABundle: []byte("not pem")},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v): no error", bad)
		}
	}
}

// A snapshot larger than minio-go's part size (16 MiB) goes up as a
// multipart upload.
func TestS3StoreMultipart(t *testing.T) {
	srv := s3server.Start(t, "snapshots")
	s := newStore(t, srv, nil)
	ctx := context.Background()
	data := bytes.Repeat([]byte("fke snapshot "), (17<<20)/13)
	if err := s.Put(ctx, "big.db", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(ctx, "big.db")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d of %d bytes: %v", len(got), len(data), err)
	}
}
