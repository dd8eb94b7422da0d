package demoserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

func TestInfoReportsGPUsAndEnvironment(t *testing.T) {
	env := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "POD_NAME": "demo-1", "SECRET": "x"}
	s := &Server{
		Getenv:   func(k string) string { return env[k] },
		Environ:  func() []string { return []string{"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b", "POD_NAME=demo-1", "SECRET=x"} },
		Hostname: func() (string, error) { return "demo-1", nil },
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	var info Info
	if err := json.NewDecoder(rec.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	if info.Hostname != "demo-1" || !slices.Equal(info.GPUs, []string{"GPU-a", "GPU-b"}) ||
		info.Env["POD_NAME"] != "demo-1" || info.Env["SECRET"] != "" {
		t.Fatalf("info = %+v", info)
	}
}

func TestGPUs(t *testing.T) {
	for in, want := range map[string][]string{"": {}, "0": {"0"}, "0, 1": {"0", "1"}, "all": {"all"}} {
		if got := GPUs(in); !slices.Equal(got, want) {
			t.Errorf("GPUs(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestBurn(t *testing.T) {
	h := (&Server{}).Handler()
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/burn?ms=50", nil))
	if rec.Code != http.StatusOK || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("burn: %d after %s", rec.Code, time.Since(start))
	}
	for _, bad := range []string{"/burn", "/burn?ms=-1", "/burn?ms=abc"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", bad, nil))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, rec.Code)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthz: %d", rec.Code)
	}
}
