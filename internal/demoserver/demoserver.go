// Package demoserver is fke's demo inference server (fke-demo-server): it
// answers with the host it runs on, the GPUs it was given and selected
// environment, and burns CPU on request so that autoscaling can be shown.
package demoserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxBurn bounds one /burn request.
const MaxBurn = 10 * time.Second

// envPrefixes select the environment a response reports.
var envPrefixes = []string{"NVIDIA_", "CUDA_", "POD_", "NODE_", "FKE_", "KUBERNETES_SERVICE_"}

// Info is the answer of GET /.
type Info struct {
	Hostname string `json:"hostname"`
	// GPUs are the devices in NVIDIA_VISIBLE_DEVICES ("all", "none" and
	// "void" are reported as given); empty when none were given.
	GPUs []string          `json:"gpus"`
	Env  map[string]string `json:"env"`
}

// Server serves the demo endpoints. Getenv and Hostname default to the
// process's own.
type Server struct {
	Getenv   func(string) string
	Environ  func() []string
	Hostname func() (string, error)
}

// Handler returns the routes: GET / (Info as JSON), GET /burn?ms=N (burns
// one CPU for N ms, at most MaxBurn) and GET /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.info)
	mux.HandleFunc("GET /burn", burn)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

func (s *Server) info(w http.ResponseWriter, _ *http.Request) {
	getenv, environ, hostname := s.Getenv, s.Environ, s.Hostname
	if getenv == nil {
		getenv = os.Getenv
	}
	if environ == nil {
		environ = os.Environ
	}
	if hostname == nil {
		hostname = os.Hostname
	}
	h, err := hostname()
	if err != nil {
		http.Error(w, "hostname: "+err.Error(), http.StatusInternalServerError)
		return
	}
	info := Info{Hostname: h, GPUs: GPUs(getenv("NVIDIA_VISIBLE_DEVICES")), Env: map[string]string{}}
	for _, kv := range environ() {
		k, v, _ := strings.Cut(kv, "=")
		if slices.ContainsFunc(envPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			info.Env[k] = v
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(info)
}

// GPUs splits an NVIDIA_VISIBLE_DEVICES value into device names.
func GPUs(visible string) []string {
	out := []string{}
	for _, d := range strings.Split(visible, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

func burn(w http.ResponseWriter, r *http.Request) {
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	if err != nil || ms < 0 {
		http.Error(w, "ms must be a non-negative number of milliseconds, e.g. /burn?ms=200", http.StatusBadRequest)
		return
	}
	d := min(time.Duration(ms)*time.Millisecond, MaxBurn)
	start := time.Now()
	x := uint64(1)
	for time.Since(start) < d && r.Context().Err() == nil {
		for range 10000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"burnedMs": time.Since(start).Milliseconds(), "x": x % 10})
}
