package gpumetrics

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

const exposition = `# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",pod="infer-a",namespace="default",container="srv"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",pod="infer-a",namespace="default",container="srv"} 40
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-2",pod="",namespace="",container=""} 0
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0",pod="infer-a",namespace="default",container="srv"} 1000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-1",pod="infer-a",namespace="default",container="srv"} 500
`

func TestAgentsScrapeRunningAgentPods(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, exposition)
	}))
	defer srv.Close()
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	agent := func(name string, phase corev1.PodPhase, ip string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"app": "agent"}},
			Spec:       corev1.PodSpec{NodeName: name},
			Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
		}
	}
	p, _ := strconv.Atoi(port)
	clk := clocktesting.NewFakeClock(time.Unix(500, 0))
	a := &Agents{
		Lister: corelisters.NewPodLister(indexer(
			agent("n1", corev1.PodRunning, host),
			agent("n2", corev1.PodPending, ""),
			// an agent that does not answer leaves only its own pods out
			agent("n3", corev1.PodRunning, "127.0.0.2"),
		)),
		Namespace: "kube-system", Selector: labels.SelectorFromSet(labels.Set{"app": "agent"}), Port: p,
		Timeout: time.Second, Clock: clk, Log: slog.New(slog.DiscardHandler),
	}
	a.ScrapeOnce(context.Background())
	pods, at := a.Pods()
	if !at.Equal(time.Unix(500, 0)) {
		t.Errorf("scraped at %v", at)
	}
	got := pods[PodKey{"default", "infer-a"}]
	if len(pods) != 1 || got[GPUUtil] != 60 || got[FBUsed] != 1500 {
		t.Errorf("pods %v, want default/infer-a at 60%% and 1500 MiB", pods)
	}
}
