package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
)

// Names of the objects in a tenant's namespace.
const (
	// SecretName holds every file the components read (see files).
	SecretName = "control-plane"
	// APIServerService is the API server's NodePort Service.
	APIServerService = "kube-apiserver"
	// EtcdService is the dedicated etcd's headless Service and StatefulSet.
	EtcdService = "etcd"
	// APIServerServicePort is the API server's port inside the management
	// cluster (https://kube-apiserver.<namespace>.svc:6443).
	APIServerServicePort = 6443

	controllerManagerPort = 10257
	schedulerPort         = 10259
	etcdClientPort        = 2379
	etcdPeerPort          = 2380
	etcdMetricsPort       = 2381

	// mountDir is where the components find the Secret's files.
	mountDir = "/etc/fke"
	binDir   = "/usr/local/bin"
)

// Labels of the objects the runtime makes.
const (
	// LabelCluster holds "<namespace>.<name>" of the tenant's Cluster on
	// its namespace (a label value cannot hold "/").
	LabelCluster = "fke.dev/hosted-cluster"
	// LabelComponent names the component of a pod.
	LabelComponent = "fke.dev/component"
	// AnnotationCluster holds the Cluster's key (namespace/name).
	AnnotationCluster = "fke.dev/cluster"
	// AnnotationVersion holds the Kubernetes version a Deployment runs.
	AnnotationVersion = "fke.dev/version"
	// AnnotationDatastore says where the tenant's data lives.
	AnnotationDatastore = "fke.dev/datastore"
	// AnnotationSecretHash is a hash of the Secret's data on the pod
	// template: a changed certificate rolls the components.
	AnnotationSecretHash = "fke.dev/secret-hash"
)

// Datastores.
const (
	// Dedicated: a StatefulSet of etcd members of the tenant's own.
	Dedicated = "dedicated"
	// Shared: a key prefix, user and role of the tenant's own in the
	// shared etcd cluster (SharedEtcdName in Options.SystemNamespace).
	Shared = "shared"
)

// Files in the Secret beyond the PKI bundle's.
const (
	// datastoreCA, datastoreCert and datastoreKey are what the API server
	// presents to and trusts of its etcd: the tenant's etcd CA and client
	// certificate (dedicated), or the shared etcd's CA and the tenant
	// user's certificate (shared).
	datastoreCA   = "datastore-ca.crt"
	datastoreCert = "datastore-client.crt"
	datastoreKey  = "datastore-client.key"
	schedulerYAML = "kube-scheduler.yaml"
	// admissionYAML and webhookKubeconfig tell the API server to present
	// its webhook client certificate to admission webhooks (the VPA's
	// requires it).
	admissionYAML     = "admission.yaml"
	webhookKubeconfig = "webhook-client.kubeconfig"
)

// Namespace is the management cluster's namespace of the control plane of
// key ("namespace/name" of its Cluster): fke-<namespace>-<name>, shortened
// with a hash to fit a DNS label.
func Namespace(key string) string {
	ns, name, _ := strings.Cut(key, "/")
	n := "fke-" + ns + "-" + name
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(key))
	return strings.TrimRight(n[:50], "-") + "-" + hex.EncodeToString(sum[:])[:12]
}

// files locates the Secret's files as mounted into a pod.
type files struct{}

func (files) PKI(file string) string        { return path.Join(mountDir, file) }
func (files) Kubeconfig(user string) string { return path.Join(mountDir, user+".kubeconfig") }
func (files) SchedulerConfig() string       { return path.Join(mountDir, schedulerYAML) }

var _ controlplane.Files = files{}

// plane is what rendering one control plane needs.
type plane struct {
	spec      controlplane.Spec
	namespace string
	// image returns the image of a component at a version.
	image func(component, version string) string
	// nodePort is the API server's port on every node and in its pod.
	nodePort int32
	// endpointHost is where users and nodes reach the node port.
	endpointHost string
	datastore    string
	// etcdServers are the URLs the API server reaches its etcd at.
	etcdServers []string
	// etcdPrefix is the API server's key prefix (shared datastore).
	etcdPrefix        string
	apiServerReplicas int32
	etcdReplicas      int32
	// secretHash rolls the pods when the Secret's data changes.
	secretHash string
}

func (p plane) version(component string) string {
	if v := p.spec.ComponentVersions[component]; v != "" {
		return v
	}
	return p.spec.Version
}

func meta(name, namespace string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
}

func componentLabels(component string) map[string]string {
	return map[string]string{LabelComponent: component}
}

// apiServerArgs: the API server listens on every address of its pod at
// the node port's number and advertises the endpoint's host, so that the
// kubernetes Service of the tenant (kept by the lease endpoint reconciler
// of every replica) points where nodes reach it.
func (p plane) apiServerArgs() []string {
	f := files{}
	args := []string{
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(int(p.nodePort)),
		"--advertise-address=" + p.endpointHost,
		"--etcd-servers=" + strings.Join(p.etcdServers, ","),
		"--etcd-cafile=" + f.PKI(datastoreCA),
		"--etcd-certfile=" + f.PKI(datastoreCert),
		"--etcd-keyfile=" + f.PKI(datastoreKey),
		"--admission-control-config-file=" + f.PKI(admissionYAML),
		// /readyz reports etcd unready after 10 s without an answer, not
		// upstream's 2 s: on a busy management cluster an etcd read takes
		// seconds, and both replicas share the one etcd, so taking them
		// out of the Service serves no one. The API server also asks etcd
		// at most every half of it (5 s), not every second, however often
		// the kubelet probes: fewer linearizable reads for an idle tenant's
		// etcd (bench/README).
		"--etcd-readycheck-timeout=10s",
	}
	if p.etcdPrefix != "" {
		// The tenant's role grants only its prefix; the API server's
		// compaction writes a key outside it, so the shared etcd compacts
		// itself (--auto-compaction-retention).
		args = append(args, "--etcd-prefix="+p.etcdPrefix, "--etcd-compaction-interval=0")
	}
	return append(args, controlplane.APIServerFlags(f, p.spec.ServiceCIDR)...)
}

// volume mounts the Secret's keys a component needs, and nothing else.
func volume(keys ...string) corev1.Volume {
	sort.Strings(keys)
	items := make([]corev1.KeyToPath, len(keys))
	for i, k := range keys {
		items[i] = corev1.KeyToPath{Key: k, Path: k}
	}
	return corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: SecretName, Items: items, DefaultMode: ptr.To[int32](0o440),
	}}}
}

// componentKeys lists the Secret's keys each component reads.
func componentKeys(component string) []string {
	switch component {
	case controlplane.APIServer:
		return []string{
			pki.APIServerCertFile, pki.APIServerKeyFile, pki.CACertFile,
			pki.APIServerKubeletClientCertFile, pki.APIServerKubeletClientKeyFile,
			pki.SAPubFile, pki.SAKeyFile, encryption.ConfigFile,
			pki.FrontProxyCACertFile, pki.FrontProxyClientCertFile, pki.FrontProxyClientKeyFile,
			datastoreCA, datastoreCert, datastoreKey,
			pki.APIServerWebhookClientCertFile, pki.APIServerWebhookClientKeyFile, admissionYAML, webhookKubeconfig,
		}
	case controlplane.ControllerManager:
		return []string{
			pki.ControllerManager + ".kubeconfig", pki.CACertFile, pki.CAKeyFile, pki.FrontProxyCACertFile, pki.SAKeyFile,
		}
	case controlplane.Scheduler:
		return []string{pki.Scheduler + ".kubeconfig", schedulerYAML}
	case controlplane.Etcd:
		return []string{pki.EtcdCACertFile, pki.EtcdServerCertFile, pki.EtcdServerKeyFile, pki.EtcdPeerCertFile, pki.EtcdPeerKeyFile}
	}
	return nil
}

// podSecurity runs a component as a non-root user that reads the Secret
// through its group, with no privileges.
func podSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func containerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// Probes: a component under a busy node's load answers slowly, not never,
// so each probe waits up to 15 s (as kubeadm's static pods); startup is
// polled often (a plane is ready as soon as it serves) and allowed 4
// minutes. A live component is restarted after 3 minutes without an
// answer, not kubeadm's 80 s: slow is not dead, and a restart on a
// management cluster whose CPU is spent spends the component's start-up
// CPU again: with a shorter limit, planes starting beside serving ones
// get every replica of those restarted, which loads the cluster further
// (bench/README). Readiness is polled every 2 s where it steers traffic
// (the API server's Service), every 10 s where it only reports (etcd
// members, whose Service publishes addresses that are not ready,
// kube-controller-manager, kube-scheduler, kwok): an idle tenant's probes
// are a share of its CPU (bench/README).
type probeKind int

const (
	startup probeKind = iota
	liveness
	readiness
	// readinessReport is readiness that no Service's endpoints follow.
	readinessReport
)

func probe(h corev1.ProbeHandler, kind probeKind) *corev1.Probe {
	p := &corev1.Probe{ProbeHandler: h, TimeoutSeconds: 15}
	switch kind {
	case startup:
		p.PeriodSeconds, p.FailureThreshold = 2, 120
	case liveness:
		p.PeriodSeconds, p.FailureThreshold = 10, 18
	case readiness:
		p.PeriodSeconds, p.FailureThreshold = 2, 3
	case readinessReport:
		p.PeriodSeconds, p.FailureThreshold = 10, 3
	}
	return p
}

func httpsProbe(path string, port int32, kind probeKind) *corev1.Probe {
	return probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTPS}}, kind)
}

func requests(cpu, memory string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
	}}
}

// deployment renders one component's Deployment.
func (p plane) deployment(component string, replicas int32, args []string, port int32, res corev1.ResourceRequirements) *appsv1.Deployment {
	labels := componentLabels(component)
	version := p.version(component)
	tmp := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pod := corev1.PodSpec{
		// Components reach the API server through the management cluster's
		// Service; they need no token of that cluster.
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		SecurityContext:               podSecurity(),
		Affinity:                      spread(labels),
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		Volumes:                       []corev1.Volume{volume(componentKeys(component)...), tmp},
		Containers: []corev1.Container{{
			Name:            component,
			Image:           p.image(component, version),
			Command:         append([]string{path.Join(binDir, component)}, args...),
			Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: port}},
			Env:             []corev1.EnvVar{{Name: "GOGC", Value: "50"}},
			Resources:       res,
			SecurityContext: containerSecurity(),
			VolumeMounts: []corev1.VolumeMount{
				{Name: "files", MountPath: mountDir, ReadOnly: true},
				{Name: "tmp", MountPath: "/tmp"},
			},
			StartupProbe:   httpsProbe("/livez", port, startup),
			LivenessProbe:  httpsProbe("/livez", port, liveness),
			ReadinessProbe: httpsProbe("/readyz", port, readiness),
		}},
	}
	if component != controlplane.APIServer {
		// kube-controller-manager and kube-scheduler serve /healthz only.
		c := &pod.Containers[0]
		c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = httpsProbe("/healthz", port, startup), httpsProbe("/healthz", port, liveness), httpsProbe("/healthz", port, readinessReport)
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta(component, p.namespace, labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				// A new replica serves before an old one stops.
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{AnnotationSecretHash: p.secretHash}},
				Spec:       pod,
			},
		},
	}
	d.Annotations = map[string]string{AnnotationVersion: version}
	return d
}

// workload is a Deployment of one replica beside the control plane (kwok,
// an addon process): one container running command of image with args,
// its files (keys of the Secret named like it) at mountDir, replaced on
// change (Recreate: never two at once) and when hash changes.
type workload struct {
	name    string
	labels  map[string]string
	image   string
	command string
	args    []string
	// port is the container's port (none when its number is 0).
	port     corev1.ContainerPort
	mountDir string
	env      []corev1.EnvVar
	// health probes startup, liveness and readiness (none when nil).
	health *corev1.ProbeHandler
	hash   string
	keys   []string
}

func (w workload) deployment(ns string) *appsv1.Deployment {
	items := make([]corev1.KeyToPath, 0, len(w.keys))
	for _, k := range w.keys {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	c := corev1.Container{
		Name:            w.name,
		Image:           w.image,
		Command:         append([]string{w.command}, w.args...),
		Env:             append([]corev1.EnvVar{{Name: "GOGC", Value: "50"}}, w.env...),
		Resources:       requests("50m", "64Mi"),
		SecurityContext: containerSecurity(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "files", MountPath: w.mountDir, ReadOnly: true},
			{Name: "tmp", MountPath: "/tmp"},
		},
	}
	if w.port.ContainerPort != 0 {
		c.Ports = []corev1.ContainerPort{w.port}
	}
	if w.health != nil {
		c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = probe(*w.health, startup), probe(*w.health, liveness), probe(*w.health, readinessReport)
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta(w.name, ns, w.labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: w.labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: w.labels, Annotations: map[string]string{AnnotationSecretHash: w.hash}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               podSecurity(),
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Volumes: []corev1.Volume{{Name: "files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: w.name, Items: items, DefaultMode: ptr.To[int32](0o440),
					}}}, {Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					Containers: []corev1.Container{c},
				},
			},
		},
	}
}

// spread prefers one replica per node.
func spread(labels map[string]string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

// leaderElection is how the one replica of kube-controller-manager and of
// kube-scheduler holds its Lease; election keeps a rolling update from
// running two at once. Upstream's defaults (15 s, 10 s, 2 s) make a
// leader stop, and its container restart, when its API server has not
// answered for 10 s: on a management cluster whose CPU is spent (many
// planes starting), every slow moment would restart them, and each restart
// spends its start-up CPU again. A leader here rides out 40 s of a slow
// API server and renews every 10 s instead of 2 s; the cost is a longer
// handover when a leader dies without releasing its Lease (up to a
// minute: kube-controller-manager releases it on exit only behind an
// alpha feature gate; kube-scheduler releases it).
var leaderElection = controlplane.LeaderElection{LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second}

// components renders the Deployments of kube-apiserver,
// kube-controller-manager and kube-scheduler.
func (p plane) components() []*appsv1.Deployment {
	f := files{}
	kcm := slices.Concat([]string{
		"--bind-address=0.0.0.0", "--secure-port=" + strconv.Itoa(controllerManagerPort), "--cert-dir=/tmp",
	}, leaderElection.Flags(), controlplane.ControllerManagerFlags(f, p.spec))
	sched := append([]string{
		"--bind-address=0.0.0.0", "--secure-port=" + strconv.Itoa(schedulerPort), "--cert-dir=/tmp",
	}, controlplane.SchedulerFlags(f)...)
	return []*appsv1.Deployment{
		p.deployment(controlplane.APIServer, p.apiServerReplicas, p.apiServerArgs(), p.nodePort, requests("100m", "256Mi")),
		p.deployment(controlplane.ControllerManager, 1, kcm, controllerManagerPort, requests("50m", "64Mi")),
		p.deployment(controlplane.Scheduler, 1, sched, schedulerPort, requests("25m", "48Mi")),
	}
}

// apiServerService exposes the API server on a node port (0: the
// management API server picks one); the port inside the cluster is
// APIServerServicePort.
func apiServerService(namespace string, nodePort int32) *corev1.Service {
	target := intstr.FromInt32(nodePort)
	if nodePort == 0 {
		target = intstr.FromInt32(APIServerServicePort)
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta(APIServerService, namespace, componentLabels(controlplane.APIServer)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: componentLabels(controlplane.APIServer),
			Ports: []corev1.ServicePort{{
				Name: "https", Port: APIServerServicePort, TargetPort: target, NodePort: nodePort, Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// pdb keeps minAvailable pods of component through voluntary disruptions.
func pdb(namespace, component string, minAvailable int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: meta(component, namespace, componentLabels(component)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector:     &metav1.LabelSelector{MatchLabels: componentLabels(component)},
		},
	}
}

// etcdMember is the DNS name of member i of the etcd StatefulSet name.
func etcdMember(name, namespace string, i int) string {
	return etcdPodHost(fmt.Sprintf("%s-%d", name, i), name, namespace)
}

// etcdPodHost is the name of the member whose pod is pod.
func etcdPodHost(pod, name, namespace string) string {
	return pod + "." + name + "." + namespace + ".svc"
}

// etcdNames are the names etcd's certificates cover: every member and the
// headless Service.
func etcdNames(name, namespace string) []string {
	return []string{"*." + name + "." + namespace + ".svc", name + "." + namespace + ".svc"}
}

// etcdURLs are the client URLs of an etcd StatefulSet's members.
func etcdURLs(name, namespace string, replicas int) []string {
	out := make([]string, replicas)
	for i := range out {
		out[i] = "https://" + etcdMember(name, namespace, i) + ":" + strconv.Itoa(etcdClientPort)
	}
	return out
}

// etcdCluster renders an etcd cluster of replicas members as a
// StatefulSet (started in parallel: a member waits for a quorum), its
// headless Service and a PodDisruptionBudget that keeps a quorum. Members
// talk TLS with client certificates on both ports; keys are files of the
// Secret secret (etcd's CA, server and peer pairs, named as in a PKI
// bundle). extra are more etcd flags.
func etcdCluster(name, namespace, secret, image string, replicas int32, extra []string, secretHash string) (*appsv1.StatefulSet, *corev1.Service, *policyv1.PodDisruptionBudget) {
	labels := map[string]string{LabelComponent: name}
	f := files{}
	var peers []string
	for i := range int(replicas) {
		peers = append(peers, fmt.Sprintf("%s-%d=https://%s:%d", name, i, etcdMember(name, namespace, i), etcdPeerPort))
	}
	self := etcdPodHost("$(POD_NAME)", name, namespace)
	args := append([]string{
		"--name=$(POD_NAME)",
		// One data directory per cluster state (members.go): what a start
		// as "new" may write after its member was removed never reaches the
		// start as "existing" that joins the cluster again.
		"--data-dir=/var/lib/etcd/$(ETCD_INITIAL_CLUSTER_STATE)",
		"--listen-client-urls=https://0.0.0.0:" + strconv.Itoa(etcdClientPort),
		"--advertise-client-urls=https://" + self + ":" + strconv.Itoa(etcdClientPort),
		"--listen-peer-urls=https://0.0.0.0:" + strconv.Itoa(etcdPeerPort),
		"--initial-advertise-peer-urls=https://" + self + ":" + strconv.Itoa(etcdPeerPort),
		"--initial-cluster=" + strings.Join(peers, ","),
		// --initial-cluster-state comes from the pod's annotation (the
		// environment below, read at every start of the container): "new"
		// from the template, "existing" once the runtime has replaced the
		// member (members.go).
		"--initial-cluster-token=" + namespace + "-" + name,
		// Health and metrics only, for the kubelet's probes.
		"--listen-metrics-urls=http://0.0.0.0:" + strconv.Itoa(etcdMetricsPort),
		"--cert-file=" + f.PKI(pki.EtcdServerCertFile),
		"--key-file=" + f.PKI(pki.EtcdServerKeyFile),
		"--trusted-ca-file=" + f.PKI(pki.EtcdCACertFile),
		"--client-cert-auth=true",
		"--peer-cert-file=" + f.PKI(pki.EtcdPeerCertFile),
		"--peer-key-file=" + f.PKI(pki.EtcdPeerKeyFile),
		"--peer-trusted-ca-file=" + f.PKI(pki.EtcdCACertFile),
		"--peer-client-cert-auth=true",
		"--peer-cert-allowed-cn=" + pki.EtcdPeerCommonName,
		// A peer is who the etcd CA and the common name say it is; its
		// pod address changes with every restart, so etcd does not match it
		// against the certificate's names.
		"--peer-skip-client-san-verification=true",
		// Members share their nodes' CPU with other tenants: with etcd's
		// default 100 ms heartbeat a busy node makes followers call
		// elections and linearizable reads time out. Five times the
		// defaults (etcd's tuning guide: raise both together, the election
		// timeout ten heartbeats); a lost leader is replaced within 5 s.
		"--heartbeat-interval=500",
		"--election-timeout=5000",
		"--snapshot-count=10000",
		"--quota-backend-bytes=2147483648",
		"--log-level=warn",
	}, extra...)
	httpProbe := func(path string, kind probeKind) *corev1.Probe {
		return probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(etcdMetricsPort)}}, kind)
	}
	vol := volume(componentKeys(controlplane.Etcd)...)
	vol.Secret.SecretName = secret
	sts := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: meta(name, namespace, labels),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					AnnotationSecretHash: secretHash, AnnotationEtcdClusterState: etcdStateNew,
				}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               podSecurity(),
					Affinity:                      spread(labels),
					TerminationGracePeriodSeconds: ptr.To[int64](10),
					Volumes:                       []corev1.Volume{vol, {Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					Containers: []corev1.Container{{
						Name:    "etcd",
						Image:   image,
						Command: append([]string{path.Join(binDir, "etcd")}, args...),
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "ETCD_INITIAL_CLUSTER_STATE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
								FieldPath: "metadata.annotations['" + AnnotationEtcdClusterState + "']",
							}}},
							{Name: "GOGC", Value: "50"},
						},
						Ports: []corev1.ContainerPort{
							{Name: "client", ContainerPort: etcdClientPort}, {Name: "peer", ContainerPort: etcdPeerPort},
						},
						Resources:       requests("50m", "64Mi"),
						SecurityContext: containerSecurity(),
						// etcd's last words ("has already been bootstrapped")
						// tell the runtime a member needs replacing.
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						VolumeMounts: []corev1.VolumeMount{
							{Name: "files", MountPath: mountDir, ReadOnly: true},
							{Name: "data", MountPath: "/var/lib/etcd"},
						},
						StartupProbe:   httpProbe("/livez", startup),
						LivenessProbe:  httpProbe("/livez", liveness),
						ReadinessProbe: httpProbe("/readyz", readinessReport),
					}},
				},
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta(name, namespace, labels),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			// Members find each other before they are ready.
			PublishNotReadyAddresses: true,
			Selector:                 labels,
			Ports: []corev1.ServicePort{
				{Name: "client", Port: etcdClientPort, Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: etcdPeerPort, Protocol: corev1.ProtocolTCP},
			},
		},
	}
	return sts, svc, pdb(namespace, name, replicas/2+1)
}
