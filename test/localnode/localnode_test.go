// Package localnode tests real worker nodes made by the local provider: a
// cluster created with the fke CLI and a pool of local nodes (kubelet,
// containerd and kube-proxy in their own namespaces), shared by the cases.
package localnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/manager"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// requireNodeTools skips the test (fails it under CI) when this host
// cannot run local nodes.
func requireNodeTools(t *testing.T) {
	t.Helper()
	checks := localnodes.Checks(t.Context(), binaries.Finder{Dir: testenv.BinDir(t)}, hostnet.New(nil, nil))
	if err := localnodes.Unavailable(checks); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("local nodes cannot run here: %v", err)
		}
		t.Skipf("local nodes cannot run here: %v", err)
	}
	if left, err := hostnet.New(nil, nil).Leftovers(t.Context()); err != nil || len(left) > 0 {
		t.Skipf("another fke runs local nodes on this host (%v, %v)", left, err)
	}
}

// TestLocalNodes: a pool of two local nodes in a cluster made with the CLI.
// Its nodes pull their sandbox image from fke's registry (no pause image
// configured); the test's app image is imported into them.
func TestLocalNodes(t *testing.T) {
	requireNodeTools(t)
	images := buildImages(t)
	t.Setenv(manager.EnvNodeImages, strings.Join(images, ","))
	e := upForLocalNodes(t)
	e.MustRun("cluster", "create", "demo", "--wait")
	registry := e.WaitSystemImages()
	start := time.Now()
	e.MustRun("nodepool", "create", "demo/cpu", "--provider", "local", "--instance-type", "cpu-small", "--replicas", "2")
	cs := e.Tenant("demo")
	var nodes []corev1.Node
	testenv.Eventually(t, 3*time.Minute, "two Ready local nodes", func() error {
		list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		nodes = nodes[:0]
		for _, n := range list.Items {
			if nodeutil.NodeReady(&n) {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) != 2 {
			return fmt.Errorf("%d of %d nodes Ready", len(nodes), len(list.Items))
		}
		return nil
	})
	t.Logf("FIGURE pool create -> 2 nodes Ready: %s", time.Since(start).Round(10*time.Millisecond))
	a, b := nodes[0], nodes[1]
	for _, n := range nodes {
		if n.Spec.PodCIDR == "" || !strings.HasPrefix(n.Spec.ProviderID, localnodes.ProviderIDPrefix) || n.Labels["fke.dev/nodepool"] == "" {
			t.Errorf("node %s: podCIDR %q, providerID %q, labels %v", n.Name, n.Spec.PodCIDR, n.Spec.ProviderID, n.Labels)
		}
		if cpu := n.Status.Allocatable[corev1.ResourceCPU]; cpu.String() != "2" {
			t.Errorf("node %s: allocatable cpu %s, want the instance type's 2", n.Name, cpu.String())
		}
	}
	server := runPod(t, cs, "server", a.Name, "serve")
	svc := expose(t, cs, "server")

	t.Run("a pod on one node reaches a pod on the other, by pod IP and ClusterIP", func(t *testing.T) {
		for name, url := range map[string]string{
			"by-ip":        "http://" + server.Status.PodIP + ":8080/",
			"by-clusterip": "http://" + svc.Spec.ClusterIP + "/",
		} {
			client := runPod(t, cs, "client-"+name, b.Name, "get", url)
			waitSucceeded(t, cs, client.Name)
			if logs := podLogs(t, cs, client.Name); !strings.Contains(logs, "hello from server") {
				t.Errorf("%s: client logs %q, want the server's answer", name, logs)
			}
		}
	})
	t.Run("a pod resolves a Service by its DNS name through the cluster DNS", func(t *testing.T) {
		cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(t.Context(), addons.DNSName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the cluster DNS is not installed: %v", err)
		}
		if corefile := cm.Data["Corefile"]; strings.Contains(corefile, "forward") {
			t.Errorf("the Corefile forwards outside the cluster:\n%s", corefile)
		}
		testenv.Eventually(t, 3*time.Minute, "CoreDNS available", func() error {
			d, err := cs.AppsV1().Deployments("kube-system").Get(t.Context(), addons.DNSName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.AvailableReplicas < 1 {
				return fmt.Errorf("%d of %d CoreDNS replicas available", d.Status.AvailableReplicas, d.Status.Replicas)
			}
			return nil
		})
		client := runPod(t, cs, "client-dns", b.Name, "get", "http://"+svc.Name+".default.svc.cluster.local/")
		waitSucceeded(t, cs, client.Name)
		if logs := podLogs(t, cs, client.Name); !strings.Contains(logs, "hello from server") {
			t.Errorf("client logs %q, want the server's answer", logs)
		}
	})
	t.Run("a pod runs an image pulled from fke's registry", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pulled"},
			Spec: corev1.PodSpec{
				NodeName: b.Name,
				Containers: []corev1.Container{{
					Name: "server", Image: image.DemoServer.Ref(registry), ImagePullPolicy: corev1.PullIfNotPresent,
				}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var ip string
		testenv.Eventually(t, 2*time.Minute, "pod pulled running", func() error {
			p, err := cs.CoreV1().Pods("default").Get(t.Context(), pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return fmt.Errorf("phase %s: %v", p.Status.Phase, p.Status.ContainerStatuses)
			}
			ip = p.Status.PodIP
			return nil
		})
		// The node reports the images its containerd holds: the sandbox
		// image and the demo server, both from the registry.
		testenv.Eventually(t, time.Minute, "registry images on node "+b.Name, func() error {
			n, err := cs.CoreV1().Nodes().Get(t.Context(), b.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, want := range []string{image.Pause.Ref(registry), image.DemoServer.Ref(registry)} {
				if !nodeHasImage(n, want) {
					return fmt.Errorf("node %s has no image %s: %v", n.Name, want, n.Status.Images)
				}
			}
			return nil
		})
		testenv.Eventually(t, 30*time.Second, "the demo server answers", func() error {
			resp, err := http.Get("http://" + net.JoinHostPort(ip, "8080") + "/healthz")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
				return fmt.Errorf("status %d, body %q", resp.StatusCode, body)
			}
			return nil
		})
	})
	t.Run("the image name fke image push prints runs in a pod", func(t *testing.T) {
		testPushedNameRuns(t, e.For(t), cs, a.Name, images[1])
	})
	t.Run("the host reaches pods and NodePorts", func(t *testing.T) {
		if body := httpGet(t, "http://"+net.JoinHostPort(server.Status.PodIP, "8080")+"/"); !strings.Contains(body, "hello from server") {
			t.Errorf("pod IP from the host: %q", body)
		}
		port := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
		if body := httpGet(t, "http://"+net.JoinHostPort(internalIP(&b), port)+"/"); !strings.Contains(body, "hello from server") {
			t.Errorf("NodePort %s on node %s from the host: %q", port, b.Name, body)
		}
	})
	t.Run("logs and exec", func(t *testing.T) {
		e := e.For(t)
		if logs := podLogs(t, cs, "server"); !strings.Contains(logs, "serving on :8080") {
			t.Errorf("server logs %q", logs)
		}
		// Seen once: an exec of a command that exits at once returned no
		// output (containerd 1.6); a second exec answers.
		testenv.Eventually(t, 10*time.Second, "exec output", func() error {
			if out := execIn(t, e, cs, "server", "/app", "echo", "exec-works"); !strings.Contains(out, "exec-works") {
				return fmt.Errorf("exec output %q", out)
			}
			return nil
		})
	})
	t.Run("port-forward and attach", func(t *testing.T) {
		e := e.For(t)
		testPortForward(t, e.TenantConfig("demo"), cs, "server")
		testAttach(t, e.TenantConfig("demo"), cs, "server", server.Status.PodIP)
	})
	t.Run("a killed kubelet is restarted and its node is Ready again", func(t *testing.T) {
		pid := kubeletPid(t, a.Name)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "kubelet restarted", func() error {
			if p := kubeletPid(t, a.Name); p == pid || p == 0 {
				return fmt.Errorf("kubelet pid %d", p)
			}
			return nil
		})
		testenv.Eventually(t, time.Minute, "node Ready", func() error {
			n, err := cs.CoreV1().Nodes().Get(t.Context(), a.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeutil.NodeReady(n) {
				return fmt.Errorf("node %s not Ready", n.Name)
			}
			return nil
		})
	})
	t.Run("a frozen kubelet makes its Node NotReady, thawed it is Ready again", func(t *testing.T) {
		testFrozenKubelet(t, cs, b.Name)
	})
	t.Run("a node that fails to start is reported on its Machine", func(t *testing.T) {
		e := e.For(t)
		testFailedLaunch(t, e, images[1])
	})
	t.Run("a node's credentials cannot modify another Node", func(t *testing.T) {
		e := e.For(t)
		kc := filepath.Join(e.DataDir, "nodes", "default", "demo", a.Name, "config", "kubelet.kubeconfig")
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		nodeClient := kubernetes.NewForConfigOrDie(cfg)
		patch := []byte(`{"metadata":{"labels":{"stolen":"yes"}}}`)
		if _, err := nodeClient.CoreV1().Nodes().Patch(t.Context(), b.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("node %s patching node %s: %v, want Forbidden", a.Name, b.Name, err)
		}
		if _, err := nodeClient.CoreV1().Nodes().Patch(t.Context(), a.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("node %s patching itself: %v", a.Name, err)
		}
	})
	t.Run("an expired bootstrap token cannot join", func(t *testing.T) {
		e := e.For(t)
		tok := bootstrap.Token{ID: "expire", Secret: "0123456789abcdef", Expires: time.Now().Add(-time.Minute)}
		if _, err := cs.CoreV1().Secrets("kube-system").Create(t.Context(), bootstrap.TokenSecret(tok, "cpu"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg := e.TenantConfig("demo")
		cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
		cfg.BearerToken = tok.String()
		_, err := kubernetes.NewForConfigOrDie(cfg).CertificatesV1().CertificateSigningRequests().List(t.Context(), metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("request with an expired bootstrap token: %v, want Unauthorized", err)
		}
	})
	t.Run("a host joined with fke node join runs a pod", func(t *testing.T) {
		e := e.For(t)
		file := filepath.Join(t.TempDir(), "bootstrap.yaml")
		data := e.MustRun("node", "bootstrap-file", "demo", "--pool", "metal")
		if !strings.Contains(data, "registry: "+registry) && !strings.Contains(data, "registry: \""+registry) {
			t.Errorf("the bootstrap file names no registry %s:\n%s", registry, data)
		}
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		// The joined host pulls its sandbox image from fke's registry.
		cmd := exec.Command(e.Fke, "--data-dir", e.DataDir, "--bin-dir", e.BinDir, "node", "join", "--bootstrap", file, "--name", "metal-1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("fke node join: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "removed from this host") {
				t.Errorf("fke node join did not remove its node:\n%s", out.String())
			}
			// Its Node stays NotReady in the cluster until deleted there.
			if err := cs.CoreV1().Nodes().Delete(context.Background(), "metal-1", metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}()
		testenv.Eventually(t, 2*time.Minute, "node metal-1 Ready", func() error {
			n, err := cs.CoreV1().Nodes().Get(t.Context(), "metal-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeutil.NodeReady(n) || n.Labels["fke.dev/nodepool"] != "metal" {
				return fmt.Errorf("node %s ready %v labels %v", n.Name, nodeutil.NodeReady(n), n.Labels)
			}
			return nil
		})
		p := runPod(t, cs, "on-metal", "metal-1", "get", "http://"+server.Status.PodIP+":8080/")
		waitSucceeded(t, cs, p.Name)
		// The joined host's kube-proxy serves Services, with a certificate
		// its node asked for (the bootstrap file holds none), as do the
		// manager's nodes.
		viaSvc := runPod(t, cs, "on-metal-svc", "metal-1", "get", "http://"+svc.Spec.ClusterIP+"/")
		waitSucceeded(t, cs, viaSvc.Name)
		if logs := podLogs(t, cs, viaSvc.Name); !strings.Contains(logs, "hello from server") {
			t.Errorf("a pod on metal-1 through the ClusterIP: logs %q, want the server's answer", logs)
		}
		if strings.Contains(data, "PRIVATE KEY") || strings.Contains(data, "kubeProxyKubeconfig") {
			t.Errorf("the bootstrap file holds a credential besides its token:\n%s", data)
		}
		checkProxyCertificate(t, filepath.Join(e.DataDir, "nodes", "joined", "default.demo", "metal-1"), "metal-1")
		checkProxyCertificate(t, filepath.Join(e.DataDir, "nodes", "default", "demo", a.Name), a.Name)
		testenv.Eventually(t, time.Minute, "node metal-1 holds the registry's pause image", func() error {
			n, err := cs.CoreV1().Nodes().Get(t.Context(), "metal-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeHasImage(n, image.Pause.Ref(registry)) {
				return fmt.Errorf("node metal-1 images: %v", n.Status.Images)
			}
			return nil
		})
	})
	t.Run("a manager crash leaves the nodes and their pods running", func(t *testing.T) {
		e := e.For(t)
		before, err := cs.CoreV1().Pods("default").Get(t.Context(), "server", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		managerPid := func() int {
			for _, c := range e.State().Components {
				if c.Name == "fke-manager" {
					return c.PID
				}
			}
			return 0
		}
		old, oldKubelet := managerPid(), kubeletPid(t, a.Name)
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 2*time.Minute, "a new manager serving", func() error {
			if p := managerPid(); p == old || p == 0 {
				return fmt.Errorf("manager pid %d", p)
			}
			return e.ManagerReadyz()
		})
		// The daemon holds the node's processes: the new manager takes
		// over the same kubelet instead of starting another.
		if p := kubeletPid(t, a.Name); p != oldKubelet {
			t.Errorf("kubelet pid %d after the manager crash, want the same kubelet %d", p, oldKubelet)
		}
		if body := httpGet(t, "http://"+net.JoinHostPort(server.Status.PodIP, "8080")+"/"); !strings.Contains(body, "hello from server") {
			t.Errorf("server after the restart: %q", body)
		}
		testenv.Eventually(t, time.Minute, "node Ready, pod untouched", func() error {
			n, err := cs.CoreV1().Nodes().Get(t.Context(), a.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p, err := cs.CoreV1().Pods("default").Get(t.Context(), "server", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeutil.NodeReady(n) || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("node ready %v, pod %s", nodeutil.NodeReady(n), p.Status.Phase)
			}
			if p.Status.ContainerStatuses[0].ContainerID != before.Status.ContainerStatuses[0].ContainerID || p.Status.ContainerStatuses[0].RestartCount != 0 {
				return fmt.Errorf("container %s restarts %d, was %s", p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount, before.Status.ContainerStatuses[0].ContainerID)
			}
			return nil
		})
	})
	t.Run("a second cluster with a local node runs beside this one and leaves nothing when deleted", func(t *testing.T) {
		e := e.For(t)
		testSecondCluster(t, e, cs, len(nodes))
	})
	t.Run("idle memory per node", func(t *testing.T) {
		for _, n := range nodes {
			t.Logf("FIGURE node %s RSS (kubelet+containerd+kube-proxy): %d MiB", n.Name, nodeRSS(t, n.Name)/(1<<20))
		}
	})
	t.Run("scaling down removes a node and leaves nothing of it", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("nodepool", "scale", "demo/cpu", "--replicas", "1", "--wait")
		var gone *corev1.Node
		testenv.Eventually(t, 2*time.Minute, "one node left", func() error {
			list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(list.Items) != 1 {
				return fmt.Errorf("%d nodes", len(list.Items))
			}
			for i := range nodes {
				if nodes[i].Name != list.Items[0].Name {
					gone = &nodes[i]
				}
			}
			return nil
		})
		netns := hostnet.NetnsName("default/demo", gone.Name)
		n := hostnet.Node{Netns: netns}
		n.IP = mustAddr(t, internalIP(gone))
		testenv.Eventually(t, time.Minute, "no leftovers of node "+gone.Name, func() error {
			left, err := hostnet.New(nil, nil).NodeLeftovers(t.Context(), n)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(localnodes.MountNSDir, netns)); err == nil {
				left = append(left, "mount namespace file")
			}
			if _, err := os.Stat(filepath.Join(e.DataDir, "nodes", "default", "demo", gone.Name)); err == nil {
				left = append(left, "node directory")
			}
			if pids := processesOf(t, gone.Name); len(pids) > 0 {
				left = append(left, fmt.Sprintf("processes %v", pids))
			}
			if cg, _ := filepath.Glob("/sys/fs/cgroup/*/fke/" + netns); len(cg) > 0 {
				left = append(left, fmt.Sprintf("cgroups %v", cg))
			}
			if len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
	})
	t.Run("a node whose kubelet stays stopped is repaired", func(t *testing.T) {
		e := e.For(t)
		testStoppedKubeletRepaired(t, e, cs)
	})
	t.Run("the autoscaler grows a local pool from zero for a pending pod", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("nodepool", "create", "demo/auto", "--provider", "local", "--instance-type", "cpu-small", "--min", "0", "--max", "1")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "wants-auto"},
			Spec: corev1.PodSpec{
				NodeSelector:  map[string]string{"fke.dev/nodepool": "auto"},
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "app", Image: appImage, ImagePullPolicy: corev1.PullNever, Args: []string{"echo", "scaled"}}},
			},
		}
		start := time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitSucceeded(t, cs, pod.Name)
		t.Logf("FIGURE pending pod -> local node from zero -> pod done: %s", time.Since(start).Round(10*time.Millisecond))
	})
}

// upForLocalNodes runs `fke up` in a fresh data directory; at the end it
// prints the nodes' logs when the test failed, runs `fke down --purge` and
// checks that nothing of the local nodes is left on the host.
func upForLocalNodes(t *testing.T) *testenv.Env {
	t.Helper()
	e := testenv.New(t)
	upForLocalNodesWith(t, e)
	return e
}

// upForLocalNodesWith is upForLocalNodes with e's fke and binaries.
func upForLocalNodesWith(t *testing.T, e *testenv.Env) {
	t.Helper()
	// Cleanups run last-registered first: logs, then fke down, then the check.
	t.Cleanup(func() { assertNoLeftovers(t, e.DataDir) })
	e.MustRun("up", "--warm-pool=0")
	t.Cleanup(func() {
		if out, err := e.Run("down", "--purge"); err != nil {
			t.Errorf("fke down: %v\n%s", err, out)
		}
	})
	t.Cleanup(func() { dumpNodeLogs(t, e) })
}

func nodeHasImage(n *corev1.Node, ref string) bool {
	for _, im := range n.Status.Images {
		for _, name := range im.Names {
			if name == ref {
				return true
			}
		}
	}
	return false
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// runPod runs the app with args on node and waits until it runs (or has run).
func runPod(t *testing.T, cs kubernetes.Interface, name, node string, args ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "app", Image: appImage, ImagePullPolicy: corev1.PullNever, Args: args,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, "pod "+name+" running", func() error {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = p
		if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
			return nil
		}
		return fmt.Errorf("phase %s: %v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	return got
}

// expose makes a NodePort Service of port 80 for the pods labelled app=name.
func expose(t *testing.T, cs kubernetes.Interface, name string) *corev1.Service {
	t.Helper()
	svc, err := cs.CoreV1().Services("default").Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func waitSucceeded(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "pod "+name+" succeeded", func() error {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("pod %s failed: %s", name, podLogs(t, cs, name))
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
}

func podLogs(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	data, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	return string(data)
}

func execIn(t *testing.T, e *testenv.Env, cs kubernetes.Interface, pod string, cmd ...string) string {
	t.Helper()
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "app", Command: cmd, Stdout: true, Stderr: true}, clientgoscheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.TenantConfig("demo"), "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := ex.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("exec in %s: %v (%s)", pod, err, out.String())
	}
	return out.String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	var body string
	testenv.Eventually(t, 30*time.Second, "GET "+url, func() error {
		c := http.Client{Timeout: 3 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		body = string(data)
		return err
	})
	return body
}

// processesOf returns the pids whose command line names node.
func processesOf(t *testing.T, node string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(node)) && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

func kubeletPid(t *testing.T, node string) int {
	t.Helper()
	for _, pid := range processesOf(t, "--hostname-override="+node) {
		return pid
	}
	return 0
}

// nodeRSS sums the resident memory of the node's kubelet, containerd and kube-proxy.
func nodeRSS(t *testing.T, node string) int64 {
	t.Helper()
	var total int64
	for _, pid := range processesOf(t, node) {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total += kb * 1024
			}
		}
	}
	return total
}

// assertNoLeftovers checks that nothing of the local nodes of the fke in
// dataDir is left on the host (nor fke's host network).
func assertNoLeftovers(t *testing.T, dataDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left, err := hostnet.New(nil, nil).Leftovers(ctx)
	if err != nil {
		t.Error(err)
	}
	if mounts, _ := localnodes.MountsUnder("/run/fke"); len(mounts) > 0 {
		left = append(left, fmt.Sprintf("mounts %v", mounts))
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/fke/*"); len(cg) > 0 {
		left = append(left, fmt.Sprintf("cgroups %v", cg))
	}
	if pids := processesMounting(dataDir); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes with the node directories mounted %v", pids))
	}
	if len(left) > 0 {
		t.Errorf("left behind after fke down: %v", left)
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// dumpNodeLogs prints the tails of the nodes' logs when the test failed.
func dumpNodeLogs(t *testing.T, e *testenv.Env) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(e.DataDir, "nodes", "*", "*", "*", "logs", "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		// A few short lines each: the test's own failure message, printed
		// before this, must stay within the tail of a CI log.
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 10 {
			lines = lines[len(lines)-10:]
		}
		for i, line := range lines {
			if len(line) > 240 {
				lines[i] = line[:240] + "…"
			}
		}
		t.Logf("---- %s ----\n%s", l, strings.Join(lines, "\n"))
	}
}

// processesMounting returns the processes whose mount namespace has a
// mount of a directory under dir (a node's namespace: its containerd,
// shims, kubelet).
func processesMounting(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo")); err == nil && bytes.Contains(data, []byte(" "+dir+"/")) {
			out = append(out, pid)
		}
	}
	return out
}
