package nvml

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestMockControl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := NewMock("dgxh100", "n")
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(MockControl(m, next))
	defer srv.Close()
	uuid := m.UUIDs()[3]
	post := func(path string) int {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/mock/xid?uuid=" + uuid + "&xid=79"); code != http.StatusOK {
		t.Fatalf("xid: %d", code)
	}
	if ev, err := s.Next(ctx); err != nil || ev.UUID != uuid || ev.XID != 79 {
		t.Fatalf("event %+v, %v", ev, err)
	}
	if code := post("/mock/lost?uuid=" + uuid + "&lost=true"); code != http.StatusOK || !m.isLost(uuid) {
		t.Fatalf("lost: %d, %v", code, m.isLost(uuid))
	}
	if code := post("/mock/events?fail=true"); code != http.StatusOK {
		t.Fatalf("events: %d", code)
	}
	if _, err := s.Next(ctx); err == nil {
		t.Error("event delivery still works after fail=true")
	}
	if _, err := m.Events(ctx); err == nil {
		t.Error("a new event stream opens after fail=true")
	}
	if code := post("/mock/events?fail=false"); code != http.StatusOK {
		t.Fatalf("events: %d", code)
	}
	if s2, err := m.Events(ctx); err != nil {
		t.Errorf("no event stream after fail=false: %v", err)
	} else {
		s2.Close()
	}
	other := m.UUIDs()[1]
	if code := post("/mock/utilization?uuid=" + other + "&gpu=70"); code != http.StatusOK {
		t.Fatalf("utilization: %d", code)
	}
	if sm, err := m.Sample(ctx, other); err != nil || sm.GPUUtil != 70 || sm.MemCopyUtil != 35 {
		t.Errorf("sample after utilization=70: %+v, %v", sm, err)
	}
	for _, bad := range []string{"/mock/utilization?uuid=" + other + "&gpu=101", "/mock/utilization?uuid=GPU-none&gpu=5", "/mock/utilization?uuid=" + other,
		"/mock/events?fail=sometimes", "/mock/xid?uuid=" + uuid, "/mock/xid?uuid=GPU-none&xid=79", "/mock/lost?uuid=GPU-none&lost=true", "/mock/lost?uuid=" + uuid + "&lost=maybe"} {
		if code := post(bad); code < 400 || code >= 500 {
			t.Errorf("%s: %d, want a client error", bad, code)
		}
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Errorf("other paths are not served by next: %d", resp.StatusCode)
	}
}
