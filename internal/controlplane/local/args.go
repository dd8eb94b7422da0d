package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// layout names the files of one control plane under its data directory.
type layout struct{ root string }

func newLayout(root string) layout { return layout{root: root} }

func (l layout) PKI(file string) string      { return filepath.Join(l.root, "pki", file) }
func (l layout) etcdData() string            { return filepath.Join(l.root, "etcd") }
func (l layout) log(component string) string { return filepath.Join(l.root, "logs", component+".log") }
func (l layout) SchedulerConfig() string     { return filepath.Join(l.root, "kube-scheduler.yaml") }
func (l layout) admissionConfig() string     { return filepath.Join(l.root, "admission.yaml") }
func (l layout) webhookKubeconfig() string   { return filepath.Join(l.root, "webhook-client.kubeconfig") }
func (l layout) Kubeconfig(user string) string {
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
		if err := writeIfChanged(l.PKI(name), data); err != nil {
			return err
		}
	}
	server := endpoint(spec)
	for _, user := range []string{pki.ControllerManager, pki.Scheduler} {
		kc, err := pki.Kubeconfig(spec.Key, server, spec.PKI[pki.CACertFile], spec.PKI[pki.CertFile(user)], spec.PKI[pki.KeyFile(user)], user)
		if err != nil {
			return fmt.Errorf("kubeconfig for %s: %w", user, err)
		}
		if err := writeIfChanged(l.Kubeconfig(user), kc); err != nil {
			return err
		}
	}
	if err := writeIfChanged(l.SchedulerConfig(), controlplane.SchedulerConfig(l.Kubeconfig(pki.Scheduler), nil)); err != nil {
		return err
	}
	kc, err := controlplane.WebhookClientKubeconfig(l.PKI(pki.APIServerWebhookClientCertFile), l.PKI(pki.APIServerWebhookClientKeyFile))
	if err != nil {
		return err
	}
	if err := writeIfChanged(l.webhookKubeconfig(), kc); err != nil {
		return err
	}
	return writeIfChanged(l.admissionConfig(), controlplane.AdmissionConfig(l.webhookKubeconfig()))
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
		"--cert-file=" + l.PKI(pki.EtcdServerCertFile),
		"--key-file=" + l.PKI(pki.EtcdServerKeyFile),
		"--trusted-ca-file=" + l.PKI(pki.EtcdCACertFile),
		"--client-cert-auth=true",
		"--peer-cert-file=" + l.PKI(pki.EtcdPeerCertFile),
		"--peer-key-file=" + l.PKI(pki.EtcdPeerKeyFile),
		"--peer-trusted-ca-file=" + l.PKI(pki.EtcdCACertFile),
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
	args := append(advertiseArgs(s),
		// Nodes reach a loopback-bound API server through the host's DNAT of
		// NodeAddress to loopback.
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(s.Ports.APIServer),
		// SO_REUSEPORT: during an upgrade the new API server binds the same
		// port and serves before the old one stops (see Runtime.Upgrade).
		"--permit-port-sharing=true",
		"--etcd-servers=https://127.0.0.1:"+strconv.Itoa(s.Ports.EtcdClient),
		"--etcd-cafile="+l.PKI(pki.EtcdCACertFile),
		"--etcd-certfile="+l.PKI(pki.APIServerEtcdClientCertFile),
		"--etcd-keyfile="+l.PKI(pki.APIServerEtcdClientKeyFile),
		// The API server authenticates to admission webhooks with its
		// webhook client certificate (fke's webhooks require it).
		"--admission-control-config-file="+l.admissionConfig(),
	)
	return append(args, controlplane.APIServerFlags(l, s.ServiceCIDR)...)
}

func controllerManagerArgs(l layout, s controlplane.Spec) []string {
	return append([]string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Ports.ControllerManager),
		"--leader-elect=false",
	}, controlplane.ControllerManagerFlags(l, s)...)
}

func schedulerArgs(l layout, s controlplane.Spec) []string {
	return append([]string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Ports.Scheduler),
	}, controlplane.SchedulerFlags(l)...)
}

// componentGOGC is the Go garbage collector's target of every component
// (GOGC; Go's default is 100): an idle tenant's heap is mostly long-lived
// (the API server's OpenAPI models, schemes and caches), and at 50 the
// heap grows to 1.5x of it instead of 2x: each more tenant costs less
// memory, and its time from create to /readyz does not change. Lower
// values save a little more memory but slow the API server's start
// (figures in bench/README.md).
const componentGOGC = "50"

// componentEnv is the environment of a component (see supervisor.GoEnv).
func componentEnv(string) []string { return supervisor.GoEnv(componentGOGC) }
