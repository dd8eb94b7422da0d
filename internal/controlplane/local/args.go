package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// layout names the files of one control plane under its data directory.
type layout struct{ root string }

func newLayout(root string) layout { return layout{root: root} }

func (l layout) pki(file string) string      { return filepath.Join(l.root, "pki", file) }
func (l layout) etcdData() string            { return filepath.Join(l.root, "etcd") }
func (l layout) log(component string) string { return filepath.Join(l.root, "logs", component+".log") }
func (l layout) schedulerConfig() string     { return filepath.Join(l.root, "kube-scheduler.yaml") }
func (l layout) kubeconfig(user string) string {
	return filepath.Join(l.root, user+".kubeconfig")
}

// write puts the PKI and the component kubeconfigs on disk (0600), replacing
// what changed, so the processes can read them.
func (l layout) write(spec controlplane.Spec) error {
	if err := os.MkdirAll(filepath.Join(l.root, "pki"), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(l.root, "logs"), 0o700); err != nil {
		return err
	}
	for name, data := range spec.PKI {
		if err := writeIfChanged(l.pki(name), data); err != nil {
			return err
		}
	}
	server := endpoint(spec)
	for _, user := range []string{pki.ControllerManager, pki.Scheduler} {
		kc, err := pki.Kubeconfig(spec.Key, server, spec.PKI[pki.CACertFile], spec.PKI[pki.CertFile(user)], spec.PKI[pki.KeyFile(user)], user)
		if err != nil {
			return fmt.Errorf("kubeconfig for %s: %w", user, err)
		}
		if err := writeIfChanged(l.kubeconfig(user), kc); err != nil {
			return err
		}
	}
	return writeIfChanged(l.schedulerConfig(), schedulerConfig(l.kubeconfig(pki.Scheduler)))
}

func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func etcdArgs(l layout, s controlplane.Spec) []string {
	client := "https://127.0.0.1:" + strconv.Itoa(s.Ports.EtcdClient)
	// One member, so no peer ever connects; etcd cannot listen on no peer
	// URL (an empty --listen-peer-urls means its default), so the peer port
	// takes TLS and only the etcd peer certificate.
	peer := "https://127.0.0.1:" + strconv.Itoa(s.Ports.EtcdPeer)
	return []string{
		"--name=default",
		"--data-dir=" + l.etcdData(),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--initial-cluster-state=new",
		"--cert-file=" + l.pki(pki.EtcdServerCertFile),
		"--key-file=" + l.pki(pki.EtcdServerKeyFile),
		"--trusted-ca-file=" + l.pki(pki.EtcdCACertFile),
		"--client-cert-auth=true",
		"--peer-cert-file=" + l.pki(pki.EtcdPeerCertFile),
		"--peer-key-file=" + l.pki(pki.EtcdPeerKeyFile),
		"--peer-trusted-ca-file=" + l.pki(pki.EtcdCACertFile),
		"--peer-client-cert-auth=true",
		"--peer-cert-allowed-cn=" + pki.EtcdPeerCommonName,
		"--snapshot-count=10000",
		"--quota-backend-bytes=2147483648",
		"--log-level=warn",
	}
}

// advertiseArgs makes the API server advertise the node address, with the
// default (lease) endpoint reconciler keeping the kubernetes Service on it.
// Without a node address it advertises loopback, which the reconciler
// refuses, so the reconciler is off and nodes use their kubeconfig's endpoint.
func advertiseArgs(s controlplane.Spec) []string {
	if s.NodeAddress != "" {
		return []string{"--advertise-address=" + s.NodeAddress}
	}
	return []string{"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"}
}

// componentArgs returns the arguments of component.
func componentArgs(component string, l layout, s controlplane.Spec) []string {
	switch component {
	case controlplane.Etcd:
		return etcdArgs(l, s)
	case controlplane.APIServer:
		return apiServerArgs(l, s)
	case controlplane.ControllerManager:
		return controllerManagerArgs(l, s)
	case controlplane.Scheduler:
		return schedulerArgs(l, s)
	}
	return nil
}

func apiServerArgs(l layout, s controlplane.Spec) []string {
	return append(advertiseArgs(s),
		// Nodes reach a loopback-bound API server through the host's DNAT of
		// NodeAddress to loopback.
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(s.Ports.APIServer),
		// SO_REUSEPORT: during an upgrade the new API server binds the same
		// port and serves before the old one stops (see Runtime.Upgrade).
		"--permit-port-sharing=true",
		"--etcd-servers=https://127.0.0.1:"+strconv.Itoa(s.Ports.EtcdClient),
		"--etcd-cafile="+l.pki(pki.EtcdCACertFile),
		"--etcd-certfile="+l.pki(pki.APIServerEtcdClientCertFile),
		"--etcd-keyfile="+l.pki(pki.APIServerEtcdClientKeyFile),
		"--tls-cert-file="+l.pki(pki.APIServerCertFile),
		"--tls-private-key-file="+l.pki(pki.APIServerKeyFile),
		"--client-ca-file="+l.pki(pki.CACertFile),
		"--kubelet-client-certificate="+l.pki(pki.APIServerKubeletClientCertFile),
		"--kubelet-client-key="+l.pki(pki.APIServerKubeletClientKeyFile),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-key-file="+l.pki(pki.SAPubFile),
		"--service-account-signing-key-file="+l.pki(pki.SAKeyFile),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--encryption-provider-config="+l.pki(encryption.ConfigFile),
		"--service-cluster-ip-range="+s.ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
		"--enable-bootstrap-token-auth=true",
		"--allow-privileged=true",
		"--requestheader-client-ca-file="+l.pki(pki.FrontProxyCACertFile),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file="+l.pki(pki.FrontProxyClientCertFile),
		"--proxy-client-key-file="+l.pki(pki.FrontProxyClientKeyFile),
		"--profiling=false",
		"--v=1",
	)
}

func componentCommon(l layout, port int, user string) []string {
	kc := l.kubeconfig(user)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false",
		"--profiling=false",
		"--v=1",
	}
}

func controllerManagerArgs(l layout, s controlplane.Spec) []string {
	return append(componentCommon(l, s.Ports.ControllerManager, pki.ControllerManager),
		"--client-ca-file="+l.pki(pki.CACertFile),
		"--requestheader-client-ca-file="+l.pki(pki.FrontProxyCACertFile),
		"--root-ca-file="+l.pki(pki.CACertFile),
		"--cluster-signing-cert-file="+l.pki(pki.CACertFile),
		"--cluster-signing-key-file="+l.pki(pki.CAKeyFile),
		"--service-account-private-key-file="+l.pki(pki.SAKeyFile),
		"--use-service-account-credentials=true",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--allocate-node-cidrs=true",
		// Room for many nodes (kwok fleets of a thousand): the defaults of 20
		// requests/s leave new nodes tainted not-ready for minutes.
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--concurrent-replicaset-syncs=10",
		"--cluster-cidr="+s.PodCIDR,
		"--service-cluster-ip-range="+s.ServiceCIDR,
		"--cluster-name="+filepath.Base(s.Key),
	)
}

func schedulerArgs(l layout, s controlplane.Spec) []string {
	kc := l.kubeconfig(pki.Scheduler)
	return []string{
		"--config=" + l.schedulerConfig(),
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Ports.Scheduler),
		"--profiling=false",
		"--v=1",
	}
}

// schedulerConfig is kube-scheduler's configuration: its kubeconfig, no
// leader election, and a client fast enough to bind tens of thousands of pods.
func schedulerConfig(kubeconfig string) []byte {
	return []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ` + kubeconfig + `
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
`)
}

// componentGOGC is the Go garbage collector's target of every component
// (GOGC; Go's default is 100): an idle tenant's heap is mostly long-lived
// (the API server's OpenAPI models, schemes and caches: ~105 MB live), and
// at 50 the heap grows to 1.5x of it instead of 2x. Measured on one idle
// tenant: 517 -> 469 MB RSS, 272 -> 226 MB anonymous memory (what each more
// tenant costs), create -> /readyz unchanged (bench/README.md). 25 saves
// another ~30 MB but slows the API server's start by ~0.4 s.
const componentGOGC = "50"

// componentEnv is the environment of a component (see supervisor.GoEnv).
func componentEnv(string) []string { return supervisor.GoEnv(componentGOGC) }
