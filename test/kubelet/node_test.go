// Package kubelet tests fke-gpu-agent against the real kubelet: a kubelet
// v1.37.2 with its own containerd, joined to a tenant cluster created with
// the fke CLI, and the agent's device plugin running in the test process on
// the mock NVML backend.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"fke.dev/fke/internal/binaries"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/test/testenv"
)

// Names of the supervised processes.
const (
	containerdName = "containerd"
	kubeletName    = "kubelet"
)

// Paths every kubelet uses whatever its flags and configuration.
const (
	// kubeletPluginDir is where the kubelet serves device-plugin
	// registration and looks for plugins
	// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.DevicePluginPath).
	kubeletPluginDir = "/var/lib/kubelet/device-plugins"
	// kubeletContainerLogsDir holds the kubelet's container log symlinks
	// (k8s.io/kubernetes/pkg/kubelet.DefaultContainerLogsDir).
	kubeletContainerLogsDir = "/var/log/containers"
)

// requireNodeTools returns the kubelet binary, or skips the test (fails it
// under CI) when what a real node needs is missing: root, containerd, runc,
// the kubelet.
func requireNodeTools(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI installs the packages in hack/ci-packages.txt)", msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		missing("a real kubelet needs root (euid %d)", os.Geteuid())
	}
	for _, bin := range []string{"containerd", "runc", "unshare", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing("%s not installed (apt-get install -y containerd runc): %v", bin, err)
		}
	}
	kubelet, err := binaries.Finder{Dir: testenv.BinDir(t)}.Path(binaries.Kubelet)
	if err != nil {
		missing("kubelet not built (run `make binaries`): %v", err)
	}
	return kubelet
}

// node is one worker node: a containerd and a kubelet with their own
// directories, sockets and ports under a temp dir.
type node struct {
	t       *testing.T
	name    string
	dir     string
	kubelet string // binary
	group   *supervisor.Group

	healthzPort int
}

func (n *node) containerdSocket() string {
	return filepath.Join(n.dir, "containerd", "containerd.sock")
}
func (n *node) rootDir() string { return filepath.Join(n.dir, "kubelet") }

// PluginDir is the kubelet's device-plugin directory.
func (n *node) PluginDir() string { return filepath.Join(n.rootDir(), "device-plugins") }

// RegistrationSocket is the kubelet's device-plugin registration socket.
func (n *node) RegistrationSocket() string { return filepath.Join(n.PluginDir(), "kubelet.sock") }

// PodResourcesSocket is the kubelet's pod-resources API socket.
func (n *node) PodResourcesSocket() string {
	return filepath.Join(n.rootDir(), "pod-resources", "kubelet.sock")
}

// newNode prepares a node's files; nothing runs until Start. Cleanup stops
// the processes, unmounts what the kubelet mounted under the temp dir and
// removes it (printing the logs' tails first when the test failed).
func newNode(t *testing.T, kubeletBin, name string, tenant *rest.Config) *node {
	t.Helper()
	// Created first so that they are removed last, after the kubelet is gone.
	ensureMountPoint(t, kubeletPluginDir)
	ensureMountPoint(t, kubeletContainerLogsDir)
	// Unix socket paths are limited to 108 bytes: keep the dir short.
	dir, err := os.MkdirTemp("", "fkek-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, dir: dir, kubelet: kubeletBin, group: supervisor.NewGroup(nil)}
	t.Cleanup(n.cleanup)
	ports, err := supervisor.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	n.healthzPort = ports[1]
	for _, d := range []string{"containerd/root", "containerd/state", "containerd/opt", "cni/net.d", "kubelet/device-plugins", "container-logs", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	n.write("containerd/config.toml", n.containerdConfig())
	n.write("kubelet.yaml", n.kubeletConfig(ports[0]))
	kc, err := kubeconfigFor(tenant)
	if err != nil {
		t.Fatal(err)
	}
	n.write("kubelet.kubeconfig", string(kc))
	return n
}

// ensureMountPoint creates dir (and missing parents) on the host for the
// kubelet's private bind mount; cleanup removes what it created, if empty.
func ensureMountPoint(t *testing.T, dir string) {
	t.Helper()
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range created { // deepest first
			if err := os.Remove(d); err != nil {
				t.Logf("leaving %s: %v", d, err)
				return
			}
		}
	})
}

func (n *node) write(rel, content string) {
	n.t.Helper()
	if err := os.WriteFile(filepath.Join(n.dir, rel), []byte(content), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

// containerdConfig keeps every path of this containerd under the temp dir.
// restrict_oom_score_adj: runc cannot lower oom_score_adj below its
// parent's on these machines (see platform notes). No image can be pulled;
// the sandbox image is a name that never resolves, and no sandbox is needed
// for device allocation (the kubelet allocates at admission).
func (n *node) containerdConfig() string {
	d := filepath.Join(n.dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
    sandbox_image = "fke.invalid/pause:none"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %q
      conf_dir = %q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), n.containerdSocket(), filepath.Join(d, "opt"),
		filepath.Join(n.dir, "cni", "bin"), filepath.Join(n.dir, "cni", "net.d"))
}

// kubeletConfig: cgroupfs on cgroup v1 without QoS cgroups (nothing left in
// the host's cgroup tree), no iptables chains, every path and port its own,
// and node status posted every 250ms so that a device health change reaches
// the Node object quickly (the kubelet posts status only on that period).
func (n *node) kubeletConfig(port int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
clusterDNS: ["10.96.0.10"]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: %s
volumePluginDir: %s
nodeStatusUpdateFrequency: 250ms
nodeStatusReportFrequency: 1m
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
`, port, n.healthzPort, n.containerdSocket(), filepath.Join(n.dir, "pod-logs"), filepath.Join(n.dir, "volume-plugins"))
}

// kubeconfigFor renders a rest.Config (the tenant's admin credentials) as a kubeconfig.
func kubeconfigFor(c *rest.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tenant"] = &clientcmdapi.Cluster{
		Server:                   c.Host,
		CertificateAuthority:     c.CAFile,
		CertificateAuthorityData: c.CAData,
		TLSServerName:            c.ServerName,
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificate:     c.CertFile,
		ClientCertificateData: c.CertData,
		ClientKey:             c.KeyFile,
		ClientKeyData:         c.KeyData,
		Token:                 c.BearerToken,
	}
	kc.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: "admin"}
	kc.CurrentContext = "tenant"
	return clientcmd.Write(*kc)
}

// StartContainerd starts containerd and waits until its socket answers.
func (n *node) StartContainerd(ctx context.Context) {
	n.t.Helper()
	sock := n.containerdSocket()
	p, err := n.group.Start(ctx, supervisor.Spec{
		Name:        containerdName,
		Path:        "containerd",
		Args:        []string{"--config", filepath.Join(n.dir, "containerd", "config.toml")},
		LogPath:     filepath.Join(n.dir, "containerd.log"),
		Ready:       waitUnix(sock),
		GracePeriod: 5 * time.Second,
		MaxRestarts: 3,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		n.t.Fatalf("containerd: %v", err)
	}
}

// StartKubelet starts the kubelet and waits until its /healthz answers.
func (n *node) StartKubelet(ctx context.Context) {
	n.t.Helper()
	n.WaitReady(ctx, n.StartKubeletNoWait(ctx))
}

// StartKubeletNoWait starts the kubelet (again, after StopKubelet, with the
// same root dir) and returns at once.
//
// The kubelet's device-plugin directory is not under --root-dir: it is the
// constant /var/lib/kubelet/device-plugins/ (pluginapi.DevicePluginPath),
// and every kubelet deletes every socket there when it starts. So the
// kubelet runs in its own mount namespace where that path is a bind mount
// of <root-dir>/device-plugins; the agent in this process uses the latter.
// /var/log/containers (also fixed) is likewise bound to the temp dir. The
// namespace also keeps the kubelet's own mounts (it bind-mounts its root
// dir to make it rshared) out of the host's mount table; it ends with the
// kubelet.
func (n *node) StartKubeletNoWait(ctx context.Context) *supervisor.Process {
	n.t.Helper()
	args := []string{
		"--config=" + filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--root-dir=" + n.rootDir(),
		"--cert-dir=" + filepath.Join(n.rootDir(), "pki"),
		"--hostname-override=" + n.name,
		"--v=2",
	}
	p, err := n.group.Start(ctx, supervisor.Spec{
		Name: kubeletName,
		Path: "unshare",
		Args: append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
			`set -e; mount --bind "$1" "$2"; mount --bind "$3" "$4"; shift 4; exec "$@"`, "kubelet-mounts",
			n.PluginDir(), kubeletPluginDir, filepath.Join(n.dir, "container-logs"), kubeletContainerLogsDir, n.kubelet}, args...),
		LogPath:     filepath.Join(n.dir, "kubelet.log"),
		Ready:       supervisor.WaitHTTPReady("http://127.0.0.1:"+strconv.Itoa(n.healthzPort)+"/healthz", nil),
		GracePeriod: 5 * time.Second,
		MaxRestarts: 3,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return p
}

// WaitReady waits until the process is ready (or fails the test).
func (n *node) WaitReady(ctx context.Context, p *supervisor.Process) {
	n.t.Helper()
	if err := p.WaitReady(ctx); err != nil {
		n.t.Fatalf("%s: %v", p.Name(), err)
	}
}

// StopKubelet stops the kubelet process and waits until it is gone.
func (n *node) StopKubelet(ctx context.Context) {
	n.t.Helper()
	if err := n.group.Stop(ctx, kubeletName); err != nil {
		n.t.Fatal(err)
	}
}

func waitUnix(socket string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

func (n *node) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.group.StopAll(ctx); err != nil {
		n.t.Errorf("stopping node processes: %v", err)
	}
	if n.t.Failed() {
		for f, lines := range map[string]int{"kubelet.log": 60, "containerd.log": 20} {
			n.t.Logf("---- tail of %s ----\n%s", f, tail(filepath.Join(n.dir, f), lines))
		}
	}
	if err := unmountUnder(n.dir); err != nil {
		n.t.Errorf("unmounting under %s: %v (left in place)", n.dir, err)
		return
	}
	if err := os.RemoveAll(n.dir); err != nil {
		n.t.Errorf("removing %s: %v", n.dir, err)
	}
}

// unmountUnder unmounts every mount at or below dir, deepest first (the
// kubelet bind-mounts its root dir onto itself to make it rshared, and
// mounts pod volumes below it).
func unmountUnder(dir string) error {
	var errs []error
	for range 3 { // stacked mounts at one point need several passes
		points, err := localnodes.MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, p := range points {
			if err := syscall.Unmount(p, 0); err != nil {
				if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
					errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
				}
			}
		}
	}
	if points, err := localnodes.MountsUnder(dir); err == nil && len(points) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %v", points))
	}
	return errors.Join(errs...)
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
