package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/test/testenv"
)

// TestAddonsRequireAuthentication: the addons that run beside a tenant's
// control plane (metrics-server, the GPU metrics adapter, the VPA) each
// listen on one loopback port and nothing else, and answer no caller
// without credentials: without a client certificate, with one of another
// cluster's CA (with forged front-proxy headers too), or with one of their
// own cluster's CA whose user they do not serve (forged headers do not make
// it an admin), the TLS handshake fails or the request gets 401/403. (metrics-server and the adapter answer
// /livez, /readyz and /healthz to anyone, as kube-apiserver does, and
// discovery to any authenticated user.) The tenant API server's own calls go through:
// its aggregator reaches both metrics APIs, and it calls the VPA webhook
// with its webhook client certificate (the webhook refuses a VPA object
// whose minAllowed exceeds maxAllowed, which only the webhook checks).
func TestAddonsRequireAuthentication(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a management plane and a tenant cluster")
	}
	e := testenv.Up(t)
	ctx := t.Context()
	e.MustRun("cluster", "create", "authn", "--vertical-pod-autoscaler", "--wait")
	for _, a := range []string{addons.MetricsServerName, addons.GPUMetricsName, addons.VPAName} {
		e.WaitAddon("authn", a, fkev1.AddonReady, 2*time.Minute)
	}
	ports := e.Cluster("authn").Status.Ports
	pkiDir := filepath.Join(e.ClusterDir("authn"), "pki")
	read := func(dir, f string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	ca := read(pkiDir, pki.CACertFile)
	// caller is a client trusting the cluster CA (checking the serving
	// certificate for serverName) that presents the pair base of bundle
	// (none when base is empty).
	caller := func(bundle pki.Bundle, base, serverName string) *http.Client {
		var cert, key []byte
		if base != "" {
			cert, key = bundle[pki.CertFile(base)], bundle[pki.KeyFile(base)]
		}
		cfg, err := supervisor.ClientTLS(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ServerName = serverName
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	own := pki.Bundle{}
	for _, base := range []string{pki.APIServerWebhookClient, pki.VPAClient, pki.Manager, pki.FrontProxyClient} {
		own[pki.CertFile(base)], own[pki.KeyFile(base)] = read(pkiDir, pki.CertFile(base)), read(pkiDir, pki.KeyFile(base))
	}
	intruder, _, err := pki.EnsureBundle(nil, pki.ControlPlaneSpec{ClusterName: "intruder"})
	if err != nil {
		t.Fatal(err)
	}

	endpoints := []struct {
		name       string
		port       int32
		needle     string // in the process's command line
		serverName string
		paths      []string
	}{
		{addons.MetricsServerName, ports.MetricsServer, "--secure-port=" + strconv.Itoa(int(ports.MetricsServer)), pki.MetricsServerServiceName,
			[]string{"/apis/metrics.k8s.io/v1beta1/nodes", "/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods", "/metrics"}},
		{addons.GPUMetricsName, ports.GPUMetrics, "--secure-port=" + strconv.Itoa(int(ports.GPUMetrics)), pki.GPUMetricsServiceName,
			[]string{"/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/DCGM_FI_DEV_GPU_UTIL", "/metrics"}},
		{addons.VPAName, ports.VPAWebhook, "--webhook-address=127.0.0.1:" + strconv.Itoa(int(ports.VPAWebhook)), pki.VPAWebhookServiceName,
			[]string{"/", "/healthz", "/metrics", "/health-check"}},
	}
	for _, ep := range endpoints {
		t.Run(ep.name, func(t *testing.T) {
			addr := "127.0.0.1:" + strconv.Itoa(int(ep.port))
			procs := testenv.FindProcs(ep.needle)
			if len(procs) != 1 {
				t.Fatalf("%d processes with %q, want 1", len(procs), ep.needle)
			}
			listens, err := testenv.ListeningAddrs(procs[0].PID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(listens, []string{addr}) {
				t.Errorf("%s (pid %d) listens on %v, want only %s", ep.name, procs[0].PID, listens, addr)
			}
			if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", procs[0].PID)); err == nil {
				for _, line := range strings.Split(string(status), "\n") {
					if rss, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						t.Logf("FIGURE %s RSS (idle cluster, no nodes): %s", ep.name, strings.TrimSpace(rss))
					}
				}
			}
			type refusal struct {
				who    string
				client *http.Client
				header http.Header
			}
			admin := http.Header{"X-Remote-User": {"kubernetes-admin"}, "X-Remote-Group": {"system:masters"}}
			refused := []refusal{
				{"anonymous", caller(nil, "", ep.serverName), nil},
				{"another cluster's API server", caller(intruder, pki.APIServerWebhookClient, ep.serverName), nil},
				{"another cluster's front proxy, claiming to be its admin", caller(intruder, pki.FrontProxyClient, ep.serverName), admin},
			}
			if ep.name == addons.VPAName {
				// Users of the cluster CA other than the API server.
				refused = append(refused,
					refusal{"the VPA's own client certificate", caller(own, pki.VPAClient, ep.serverName), nil},
					refusal{"the cluster's front proxy", caller(own, pki.FrontProxyClient, ep.serverName), nil})
			} else {
				// A user of the cluster CA who may read no metrics: headers
				// claiming an admin are not believed from it.
				refused = append(refused, refusal{"the API server's webhook client, claiming to be the admin",
					caller(own, pki.APIServerWebhookClient, ep.serverName), admin})
			}
			for _, r := range refused {
				for _, path := range ep.paths {
					code, body, err := httpGet(r.client, "https://"+addr+path, r.header)
					switch {
					case err != nil && strings.Contains(err.Error(), "tls: "):
						t.Logf("%s %s: TLS handshake refused (%v)", r.who, path, err)
					case err != nil:
						t.Errorf("%s %s: %v (want a refused handshake or 401/403)", r.who, path, err)
					case code == http.StatusUnauthorized || code == http.StatusForbidden:
						t.Logf("%s %s: %d", r.who, path, code)
					default:
						t.Errorf("%s %s: %d %.200q, want it refused", r.who, path, code, body)
					}
				}
			}
		})
	}

	t.Run("the API server's calls succeed", func(t *testing.T) {
		e := e.For(t)
		rc := e.Tenant("authn").CoreV1().RESTClient()
		for _, path := range []string{"/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods", "/apis/custom.metrics.k8s.io/v1beta2"} {
			if out, err := rc.Get().AbsPath(path).DoRaw(ctx); err != nil {
				t.Errorf("GET %s through the API server: %v\n%s", path, err, out)
			}
		}
		dyn := dynamic.NewForConfigOrDie(e.TenantConfig("authn"))
		vpa := func(name, minCPU, maxCPU string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
				"metadata": map[string]any{"name": name},
				"spec": map[string]any{
					"targetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
					"resourcePolicy": map[string]any{"containerPolicies": []any{map[string]any{
						"containerName": "*", "minAllowed": map[string]any{"cpu": minCPU}, "maxAllowed": map[string]any{"cpu": maxCPU},
					}}},
				},
			}}
		}
		// The webhook's failure policy is Ignore: had the API server not
		// reached it, the object would be admitted.
		_, err := dyn.Resource(vpaGVR).Namespace("default").Create(ctx, vpa("inverted", "2", "1"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "max resource for cpu is lower than min") {
			t.Errorf("a VPA with minAllowed above maxAllowed: %v, want the webhook's refusal", err)
		}
		if _, err := dyn.Resource(vpaGVR).Namespace("default").Create(ctx, vpa("valid", "100m", "1"), metav1.CreateOptions{}); err != nil {
			t.Errorf("a valid VPA: %v", err)
		}
		code, body, err := httpGet(caller(own, pki.Manager, pki.VPAWebhookServiceName), "https://127.0.0.1:"+strconv.Itoa(int(ports.VPAWebhook))+"/healthz", nil)
		if err != nil || code != http.StatusOK || body != "ok" {
			t.Errorf("fke-manager's readiness check: %d %q %v", code, body, err)
		}
	})
}

// httpGet GETs url with client and header and returns the status and body.
func httpGet(client *http.Client, url string, header http.Header) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("reading %s: %w", url, err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}
