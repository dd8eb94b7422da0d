package localnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// appSource is the one program of the test images: the sandbox ("pause"),
// an HTTP server that names its pod, and a client that prints what a URL
// answers.
const appSource = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: app pause|serve|get URL|echo ARGS")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pause":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	case "serve":
		host, _ := os.Hostname()
		fmt.Println("serving on :8080 as", host)
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Println("request from", r.RemoteAddr)
			fmt.Fprintf(w, "hello from %s", host)
		})
		if err := http.ListenAndServe(":8080", nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "get":
		c := http.Client{Timeout: 5 * time.Second}
		for i := 0; ; i++ {
			resp, err := c.Get(os.Args[2])
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				fmt.Println(string(body))
				return
			}
			fmt.Fprintln(os.Stderr, err)
			if i == 20 {
				os.Exit(1)
			}
			time.Sleep(500 * time.Millisecond)
		}
	case "echo":
		fmt.Println(os.Args[2:])
	}
}
`

// Image names in the test nodes.
const (
	pauseImage = "fke.local/pause:test"
	appImage   = "fke.local/app:test"
)

// buildImages builds the test program and returns two docker-archive
// tarballs: the pause image and the app image.
func buildImages(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"main.go": appSource, "go.mod": "module app\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "app", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test app: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "app"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		writeArchive(t, dir, "pause.tar", pauseImage, bin, []string{"/app", "pause"}),
		writeArchive(t, dir, "app.tar", appImage, bin, []string{"/app"}),
	}
}

// writeArchive writes a one-layer docker-archive image holding bin as /app.
func writeArchive(t *testing.T, dir, file, ref string, bin []byte, entrypoint []string) string {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": entrypoint},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, file)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"layer.tar", layer.Bytes()}, {"config.json", config}, {"manifest.json", manifest}} {
		if err := out.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
