package controlplane

import (
	"path/filepath"
	"time"

	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
)

// Files locates a control plane's files as its components read them: the
// PKI bundle's files by name, the kubeconfig of each component's user and
// kube-scheduler's configuration. Each runtime lays them out its own way
// (a data directory, a Secret mounted into pods).
type Files interface {
	PKI(file string) string
	Kubeconfig(user string) string
	SchedulerConfig() string
}

// APIServerFlags are the kube-apiserver flags every runtime passes: TLS and
// client authentication, authorization, admission, service accounts,
// encryption at rest and the aggregation layer. The runtime adds where the
// API server listens and advertises, and where etcd is.
func APIServerFlags(f Files, serviceCIDR string) []string {
	return []string{
		"--tls-cert-file=" + f.PKI(pki.APIServerCertFile),
		"--tls-private-key-file=" + f.PKI(pki.APIServerKeyFile),
		"--client-ca-file=" + f.PKI(pki.CACertFile),
		"--kubelet-client-certificate=" + f.PKI(pki.APIServerKubeletClientCertFile),
		"--kubelet-client-key=" + f.PKI(pki.APIServerKubeletClientKeyFile),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-key-file=" + f.PKI(pki.SAPubFile),
		"--service-account-signing-key-file=" + f.PKI(pki.SAKeyFile),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--encryption-provider-config=" + f.PKI(encryption.ConfigFile),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
		"--enable-bootstrap-token-auth=true",
		"--allow-privileged=true",
		"--requestheader-client-ca-file=" + f.PKI(pki.FrontProxyCACertFile),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + f.PKI(pki.FrontProxyClientCertFile),
		"--proxy-client-key-file=" + f.PKI(pki.FrontProxyClientKeyFile),
		"--profiling=false",
		"--v=1",
	}
}

// ControllerManagerFlags are the kube-controller-manager flags every
// runtime passes: its credentials, the cluster's signing CA and
// service-account key, the controllers and the cluster's ranges. The
// runtime adds where it listens and whether it elects a leader.
func ControllerManagerFlags(f Files, s Spec) []string {
	kc := f.Kubeconfig(pki.ControllerManager)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--client-ca-file=" + f.PKI(pki.CACertFile),
		"--requestheader-client-ca-file=" + f.PKI(pki.FrontProxyCACertFile),
		"--root-ca-file=" + f.PKI(pki.CACertFile),
		"--cluster-signing-cert-file=" + f.PKI(pki.CACertFile),
		"--cluster-signing-key-file=" + f.PKI(pki.CAKeyFile),
		"--service-account-private-key-file=" + f.PKI(pki.SAKeyFile),
		"--use-service-account-credentials=true",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--allocate-node-cidrs=true",
		// Room for many nodes (kwok fleets of a thousand): the defaults of 20
		// requests/s leave new nodes tainted not-ready for minutes.
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--concurrent-replicaset-syncs=10",
		"--cluster-cidr=" + s.PodCIDR,
		"--service-cluster-ip-range=" + s.ServiceCIDR,
		"--cluster-name=" + s.clusterName(),
		"--profiling=false",
		"--v=1",
	}
}

// clusterName is s.ClusterName, or Key's last element when it is empty.
func (s Spec) clusterName() string {
	if s.ClusterName != "" {
		return s.ClusterName
	}
	return filepath.Base(s.Key)
}

// SchedulerFlags are the kube-scheduler flags every runtime passes; the
// runtime adds where it listens.
func SchedulerFlags(f Files) []string {
	kc := f.Kubeconfig(pki.Scheduler)
	return []string{
		"--config=" + f.SchedulerConfig(),
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--profiling=false",
		"--v=1",
	}
}

// LeaderElection is how a component that elects a leader holds its Lease:
// a leader renews it every RetryPeriod and stops leading when it could not
// for RenewDeadline; a candidate takes over LeaseDuration after the last
// renewal it saw. kube-controller-manager and kube-scheduler take the
// same three values, as flags and as configuration.
type LeaderElection struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Flags are kube-controller-manager's leader-election flags.
func (l LeaderElection) Flags() []string {
	return []string{
		"--leader-elect=true",
		"--leader-elect-lease-duration=" + l.LeaseDuration.String(),
		"--leader-elect-renew-deadline=" + l.RenewDeadline.String(),
		"--leader-elect-retry-period=" + l.RetryPeriod.String(),
	}
}

// SchedulerConfig is kube-scheduler's configuration: its kubeconfig, a
// client fast enough to bind tens of thousands of pods, and leader
// election when more than one may run at once (a rolling update; nil: no
// election).
func SchedulerConfig(kubeconfig string, le *LeaderElection) []byte {
	election := "  leaderElect: false\n"
	if le != nil {
		election = "  leaderElect: true\n" +
			"  leaseDuration: " + le.LeaseDuration.String() + "\n" +
			"  renewDeadline: " + le.RenewDeadline.String() + "\n" +
			"  retryPeriod: " + le.RetryPeriod.String() + "\n"
	}
	return []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ` + kubeconfig + `
  qps: 500
  burst: 1000
leaderElection:
` + election)
}
