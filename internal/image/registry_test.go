package image_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"fke.dev/fke/internal/image"
)

// TestPushListHead runs against go-containerregistry's in-memory registry;
// test/integration runs the same against the registry `fke up` starts.
func TestPushListHead(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	reg := image.Registry{Host: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	img, err := image.Build(image.Spec{Files: []image.File{{Path: "/x", Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := reg.Push(ctx, "team/app:v1", img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Push(ctx, "team/app:v1", img); err != nil {
		t.Fatalf("pushing again: %v", err)
	}
	desc, ok, err := reg.Head(ctx, "team/app:v1")
	if err != nil || !ok || desc.Digest != d {
		t.Fatalf("Head = %v, %v, %v; want %s", desc, ok, err, d)
	}
	if _, ok, err := reg.Head(ctx, "team/app:v2"); err != nil || ok {
		t.Fatalf("Head of a missing tag = %v, %v", ok, err)
	}
	list, err := reg.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Repository != "team/app" || list[0].Tag != "v1" || list[0].Digest != d || list[0].Size == 0 {
		t.Fatalf("List = %+v", list)
	}
	if _, err := reg.Push(ctx, "Bad Name", img); err == nil {
		t.Fatal("pushing under a bad name succeeded")
	}
	if _, err := (image.Registry{}).List(ctx); err == nil || !strings.Contains(err.Error(), "fke up") {
		t.Fatalf("no registry: %v", err)
	}
}
