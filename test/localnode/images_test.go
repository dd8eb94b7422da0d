package localnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/test/testenv"
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

// testPushedNameRuns: `fke image push` of archive (the app image) prints a
// name; a pod on node runs that exact name, which its kubelet pulls from
// fke's registry (pull policy Always: the name is resolved there even
// where the node holds the same image under another name), and `fke image
// list` shows the same name. The name is the host's (the registry's
// loopback address): the node's containerd maps it to the bridge.
func testPushedNameRuns(t *testing.T, e *testenv.Env, cs kubernetes.Interface, node, archive string) {
	out := e.MustRun("image", "push", archive, "--name", "team/pushed:v1")
	var ref string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "pushed" {
			ref = f[1]
		}
	}
	if reg := e.State().Registry; ref != reg+"/team/pushed:v1" {
		t.Fatalf("fke image push printed %q, want the name in the registry %s:\n%s", ref, reg, out)
	}
	if list := e.MustRun("image", "list"); !strings.Contains(list, ref+" ") {
		t.Errorf("fke image list lacks %s:\n%s", ref, list)
	}
	start := time.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pushed"},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "app", Image: ref, ImagePullPolicy: corev1.PullAlways, Args: []string{"serve"},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	testenv.Eventually(t, 2*time.Minute, "pod pushed running with "+ref, func() error {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod pushed failed: %v", p.Status.ContainerStatuses)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s: %v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		ip = p.Status.PodIP
		return nil
	})
	t.Logf("FIGURE pod with the pushed name -> Running: %s", time.Since(start).Round(10*time.Millisecond))
	if body := httpGet(t, "http://"+net.JoinHostPort(ip, "8080")+"/"); !strings.Contains(body, "hello from pushed") {
		t.Errorf("the pod from %s answers %q", ref, body)
	}
	if err := cs.CoreV1().Pods("default").Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}
