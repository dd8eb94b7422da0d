package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/image"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodeutil"
	"fke.dev/fke/test/testenv"
)

// BenchmarkLocalNode measures real local nodes (kubelet, containerd and
// kube-proxy in their own namespaces): `fke nodepool create` of a pool of
// one node → its Node Ready (three pools, one after the other); pod create
// → Running with its image already on the node (five pods); create →
// Running of a pod whose ~20 MB image is pulled from fke's registry (three
// images), with the kubelet's own pull time; and the resident memory of
// each idle node (kubelet + containerd + kube-proxy).
//
//	flock /tmp/fke-localnode.lock go test ./bench -run '^$' -bench LocalNode -benchtime 1x -v
func BenchmarkLocalNode(b *testing.B) {
	checks := localnodes.Checks(b.Context(), binaries.Finder{Dir: testenv.BinDir(b)}, hostnet.New(nil, nil))
	if err := localnodes.Unavailable(checks); err != nil {
		b.Skipf("local nodes cannot run here: %v", err)
	}
	e := testenv.Up(b)
	e.MustRun("cluster", "create", "demo", "--wait")
	registry := e.WaitSystemImages()
	cs := e.Tenant("demo")

	const pools = 3
	var ready []time.Duration
	var nodes []string
	for i := range pools {
		pool := fmt.Sprintf("bench%d", i)
		start := time.Now()
		e.MustRun("nodepool", "create", "demo/"+pool, "--provider", "local", "--instance-type", "cpu-small", "--replicas", "1")
		var registered time.Duration
		var node string
		testenv.Eventually(b, 3*time.Minute, "node of pool "+pool+" Ready", func() error {
			list, err := cs.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{LabelSelector: "fke.dev/nodepool=" + pool})
			if err != nil || len(list.Items) == 0 {
				return fmt.Errorf("no node yet (%v)", err)
			}
			if registered == 0 {
				registered = time.Since(start)
			}
			if !nodeutil.NodeReady(&list.Items[0]) {
				return fmt.Errorf("node %s not Ready", list.Items[0].Name)
			}
			node = list.Items[0].Name
			return nil
		})
		d := time.Since(start)
		ready = append(ready, d)
		nodes = append(nodes, node)
		b.Logf("pool %s: node %s registered after %s, Ready after %s", pool, node, registered.Round(10*time.Millisecond), d.Round(10*time.Millisecond))
	}
	b.ReportMetric(median(ready).Seconds(), "s-median-pool-to-ready")
	b.ReportMetric(slices.Max(ready).Seconds(), "s-max-pool-to-ready")

	// Pods on the first node: warm it up (sandbox and demo-server images
	// pulled once), then time pods whose image is there.
	node := nodes[0]
	demo := image.DemoServer.Ref(registry)
	benchPod(b, cs, "warm", node, demo)
	var running []time.Duration
	for i := range 5 {
		running = append(running, benchPod(b, cs, fmt.Sprintf("present-%d", i), node, demo))
	}
	b.ReportMetric(median(running).Seconds(), "s-median-pod-running")
	b.ReportMetric(slices.Max(running).Seconds(), "s-max-pod-running")
	b.Logf("pod create -> Running, image on the node: %v", running)

	// ~20 MB images (the demo server and incompressible filler), each new
	// to the node.
	var pulls, pulled []time.Duration
	var size int64
	for i := range 3 {
		ref, n := pushBigImage(b, e, registry, fmt.Sprintf("bench/big:%d", i))
		size = n
		pulls = append(pulls, benchPod(b, cs, fmt.Sprintf("pull-%d", i), node, ref))
		pulled = append(pulled, kubeletPullTime(b, cs, fmt.Sprintf("pull-%d", i)))
	}
	b.ReportMetric(float64(size)/1e6, "MB-image")
	b.ReportMetric(median(pulls).Seconds(), "s-median-pod-running-with-pull")
	b.ReportMetric(median(pulled).Seconds(), "s-median-kubelet-pull")
	b.Logf("image of %.1f MB: pod create -> Running %v; the kubelet's pull times %v", float64(size)/1e6, pulls, pulled)

	// Idle memory: the nodes settle, then RSS per node.
	for _, p := range []string{"warm", "present-0", "present-1", "present-2", "present-3", "present-4", "pull-0", "pull-1", "pull-2"} {
		if err := cs.CoreV1().Pods("default").Delete(b.Context(), p, metav1.DeleteOptions{}); err != nil {
			b.Error(err)
		}
	}
	anchor := startAnchor(b, e, cs, registry)
	time.Sleep(20 * time.Second) // a settling period, not a wait for state
	var sum, sumNoProxy, sumPSS float64
	for _, n := range nodes {
		mb, byBinary, procs, pss := nodeRSSMB(b, n)
		sum += mb
		sumPSS += pss
		sumNoProxy += mb - byBinary[binaries.KubeProxy]
		b.Logf("node %s idle: %.0f MB RSS, %.0f MB PSS (%s)", n, mb, pss, procs)
	}
	b.ReportMetric(sum/float64(len(nodes)), "MB-rss-per-idle-node")
	b.ReportMetric(sumPSS/float64(len(nodes)), "MB-pss-per-idle-node")
	b.ReportMetric(sumNoProxy/float64(len(nodes)), "MB-rss-per-idle-node-without-kube-proxy")
	amb, apss, aprocs := anchor.rss()
	b.ReportMetric(amb, "MB-rss-anchor-kubelet-containerd")
	b.ReportMetric(apss, "MB-pss-anchor-kubelet-containerd")
	b.Logf("anchor (kubelet + containerd by hand): %.0f MB RSS, %.0f MB PSS (%s)", amb, apss, aprocs)
	b.Logf("pool create -> node Ready: %v", ready)
}

// benchPod creates a pod of ref on node and returns the time until the
// API shows it Running (polled every 20 ms).
func benchPod(b *testing.B, cs kubernetes.Interface, name, node, ref string) time.Duration {
	b.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "app", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
	start := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(b.Context(), pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	deadline := start.Add(2 * time.Minute)
	for {
		p, err := cs.CoreV1().Pods("default").Get(b.Context(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("pod %s not Running after 2m: %v %+v", name, err, p.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pushBigImage pushes an image of about 20 MB (the demo server plus
// random, incompressible filler) and returns its reference as nodes name
// it and its compressed size.
func pushBigImage(b *testing.B, e *testenv.Env, registry, name string) (string, int64) {
	b.Helper()
	files, err := image.BinaryFiles(filepath.Join(filepath.Dir(e.Fke), binaries.DemoServer), image.DemoServer.Path)
	if err != nil {
		b.Fatal(err)
	}
	var have int
	for _, f := range files {
		have += len(f.Data)
	}
	filler := make([]byte, max(20_000_000-have, 1_000_000))
	if _, err := rand.Read(filler); err != nil {
		b.Fatal(err)
	}
	files = append(files, image.File{Path: "/data/filler", Data: filler})
	img, err := image.Build(image.Spec{Files: files, Entrypoint: []string{image.DemoServer.Path}, User: image.DemoServer.User})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := (image.Registry{Host: e.State().Registry}).Push(b.Context(), name, img); err != nil {
		b.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			b.Fatal(err)
		}
		size += n
	}
	return registry + "/" + name, size
}

var pulledIn = regexp.MustCompile(`Successfully pulled image "[^"]+" in ([0-9.]+m?s)`)

// kubeletPullTime reads the pull time the kubelet reports in pod's Pulled event.
func kubeletPullTime(b *testing.B, cs kubernetes.Interface, pod string) time.Duration {
	b.Helper()
	var d time.Duration
	testenv.Eventually(b, 30*time.Second, "Pulled event of "+pod, func() error {
		evs, err := cs.CoreV1().Events("default").List(b.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if m := pulledIn.FindStringSubmatch(ev.Message); ev.Reason == "Pulled" && m != nil {
				d, err = time.ParseDuration(m[1])
				return err
			}
		}
		return fmt.Errorf("no Pulled event with a time among %d events", len(evs.Items))
	})
	return d
}

// nodeRSSMB sums VmRSS of the node's kubelet, containerd and kube-proxy:
// the processes whose command line names the node (its kubelet's
// --hostname-override, the configuration files under its directory). pss
// sums their proportional set size: pages shared with other processes
// (the binaries' text, mapped by every node) count by their share.
func nodeRSSMB(b *testing.B, node string) (total float64, byBinary map[string]float64, procs string, pss float64) {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	byBinary = map[string]float64{}
	var names []string
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "/"+node+"/") && !strings.Contains(string(cmdline), "="+node+"\x00") {
			continue
		}
		mb := rssMB(pid)
		total += mb
		pss += pssMB(pid)
		bin := filepath.Base(strings.Split(string(cmdline), "\x00")[0])
		byBinary[bin] += mb
		names = append(names, fmt.Sprintf("%s %.0f MB (anon %.0f)", bin, mb, procKB(pid, "status", "RssAnon:")/1024))
	}
	return total, byBinary, strings.Join(names, ", "), pss
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// anchorNode is a kubelet and a containerd started by hand as kubeadm lays
// them out (/var/lib/kubelet, /run/containerd, in this host's network
// namespace), joined to the same cluster with its admin kubeconfig and the
// same configurations as fke's nodes, without kube-proxy and without the
// kubelet's iptables chains (it shares the host's tables). A private mount
// namespace only keeps those two directories off the host.
type anchorNode struct {
	cmd *exec.Cmd
	dir string
}

const anchorName = "bench-anchor"

// startAnchor starts the anchor node; its cleanup stops it and removes its
// files, cgroups and Node.
func startAnchor(b *testing.B, e *testenv.Env, cs kubernetes.Interface, registry string) *anchorNode {
	b.Helper()
	dir, err := os.MkdirTemp("", "fke-anchor-")
	if err != nil {
		b.Fatal(err)
	}
	l := localnodes.Layout{Dir: dir}
	for _, d := range l.Dirs() {
		if err := os.MkdirAll(d, 0o750); err != nil {
			b.Fatal(err)
		}
	}
	cgroup := localnodes.CgroupParent + "/" + anchorName
	if err := localnodes.EnsureCgroup(cgroup); err != nil {
		b.Fatal(err)
	}
	// Tainted so that nothing of the cluster lands on it.
	kubelet, err := localnodes.KubeletConfig(l, localnodes.KubeletSpec{NodeIP: hostnet.Gateway, CgroupRoot: cgroup, MaxPods: 110,
		Taints: []corev1.Taint{{Key: "fke.dev/bench-anchor", Effect: corev1.TaintEffectNoSchedule}}})
	if err != nil {
		b.Fatal(err)
	}
	// A pod network that no pod uses: the runtime reports its network ready.
	cni, err := localnodes.CNIConfig(l, netip.MustParsePrefix("10.254.254.0/24"))
	if err != nil {
		b.Fatal(err)
	}
	kubelet = append(kubelet, []byte("makeIPTablesUtilChains: false\n")...)
	containerd := localnodes.ContainerdSpec{PauseImage: image.Pause.Ref(registry), Registry: registry}
	files := map[string][]byte{
		l.ContainerdConfig():  []byte(localnodes.ContainerdConfig(l, containerd)),
		l.KubeletConfig():     kubelet,
		l.KubeletKubeconfig(): []byte(e.MustRun("kubeconfig", "demo")),
		l.CA():                e.TenantConfig("demo").CAData,
		filepath.Join(l.CNIConf(), "10-fke.conflist"): cni,
	}
	for name, hosts := range localnodes.RegistryHosts(containerd) {
		files[filepath.Join(l.ContainerdHosts(), name, "hosts.toml")] = []byte(hosts)
	}
	for p, data := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	kubeletBin, err := binaries.Finder{Dir: e.BinDir}.Path(binaries.Kubelet)
	if err != nil {
		b.Fatal(err)
	}
	_, runExisted := os.Stat(localnodes.ContainerdStateDir)
	script := fmt.Sprintf(`set -e
mkdir -p /var/lib/kubelet %[6]s %[12]s
mount --bind %[1]s /var/lib/kubelet
mount --bind %[2]s %[6]s
mount --bind %[13]s %[12]s
containerd --config %[3]s >%[4]s/containerd.log 2>&1 &
while [ ! -S %[6]s/containerd.sock ]; do sleep 0.05; done
exec %[5]s --config=%[7]s --kubeconfig=%[8]s --root-dir=/var/lib/kubelet --cert-dir=%[9]s --hostname-override=%[10]s --node-ip=%[11]s --v=1 >%[4]s/kubelet.log 2>&1
`, l.KubeletDir(), l.ContainerdState(), l.ContainerdConfig(), dir, kubeletBin, localnodes.ContainerdStateDir,
		l.KubeletConfig(), l.KubeletKubeconfig(), l.KubeletCertDir(), anchorName, hostnet.Gateway, localnodes.CNIConfDir, l.CNIConf())
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	a := &anchorNode{cmd: cmd, dir: dir}
	b.Cleanup(func() {
		// The process group is this benchmark's own child and what it started.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
		for _, p := range a.pids() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if err := cs.CoreV1().Nodes().Delete(context.Background(), anchorName, metav1.DeleteOptions{}); err != nil {
			b.Logf("deleting node %s: %v", anchorName, err)
		}
		testenv.Eventually(b, 30*time.Second, "anchor processes gone", func() error {
			if p := a.pids(); len(p) > 0 {
				return fmt.Errorf("processes %v", p)
			}
			return nil
		})
		if err := localnodes.RemoveCgroup(cgroup); err != nil {
			b.Error(err)
		}
		if runExisted != nil {
			_ = os.Remove(localnodes.ContainerdStateDir) // made by the script
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Error(err)
		}
	})
	testenv.Eventually(b, 2*time.Minute, "node "+anchorName+" Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(b.Context(), anchorName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeutil.NodeReady(n) {
			return fmt.Errorf("node %s not Ready", anchorName)
		}
		return nil
	})
	return a
}

// pids returns the anchor's processes: its kubelet (the script's process,
// which execs it) and its containerd.
func (a *anchorNode) pids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), a.dir+"/") && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// rss sums the anchor's VmRSS, and its proportional set size.
func (a *anchorNode) rss() (float64, float64, string) {
	var total, pss float64
	var names []string
	for _, pid := range a.pids() {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		mb := rssMB(pid)
		total += mb
		pss += pssMB(pid)
		names = append(names, fmt.Sprintf("%s %.0f MB", filepath.Base(strings.Split(string(cmdline), "\x00")[0]), mb))
	}
	return total, pss, strings.Join(names, ", ")
}
