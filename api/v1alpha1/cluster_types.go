package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ControlPlaneRuntime says where a Cluster's control-plane components run.
// +kubebuilder:validation:Enum=local;hosted
type ControlPlaneRuntime string

const (
	// RuntimeLocal runs etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler as supervised processes on the management machine.
	RuntimeLocal ControlPlaneRuntime = "local"
	// RuntimeHosted runs the components as Deployments (and etcd as a
	// StatefulSet) in a namespace of the Kubernetes cluster fke-manager
	// runs in (or the one its --hosted-kubeconfig names).
	RuntimeHosted ControlPlaneRuntime = "hosted"
)

// Datastore says where a Cluster's state (its etcd data) lives.
// +kubebuilder:validation:Enum=dedicated;shared
type Datastore string

const (
	// DatastoreDedicated: an etcd of the cluster's own (one member on the
	// local runtime, a StatefulSet of three on the hosted runtime).
	DatastoreDedicated Datastore = "dedicated"
	// DatastoreShared: a key prefix, an etcd user and a role of the
	// cluster's own in fke's shared etcd cluster, whose authentication
	// keeps each tenant to its prefix (hosted runtime only).
	DatastoreShared Datastore = "shared"
)

// DefaultServiceCIDR is the service range of a cluster that names none
// (the schema's default of spec.network.serviceCIDR).
const DefaultServiceCIDR = "10.96.0.0/16"

// ClusterSpec is the desired state of a tenant Kubernetes cluster.
// +kubebuilder:validation:XValidation:rule="!has(self.datastore) || self.datastore != 'shared' || (has(self.runtime) && self.runtime == 'hosted')",message="the shared datastore needs runtime hosted: set runtime: hosted or datastore: dedicated"
type ClusterSpec struct {
	// Version is the Kubernetes version of the control plane, e.g. v1.37.2.
	// Only the versions this fke runs are accepted (`fke versions`, checked by
	// fke-manager's admission webhook). A change may move one minor version
	// forward at most and never back.
	// +kubebuilder:default="v1.37.2"
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!isSemver(oldSelf, true) || !isSemver(self, true) || semver(self, true).compareTo(semver(oldSelf, true)) >= 0",messageExpression="'cannot change version from ' + oldSelf + ' back to ' + self + ': downgrades are not supported; keep ' + oldSelf + ' or choose a newer version'"
	// +kubebuilder:validation:XValidation:rule="!isSemver(oldSelf, true) || !isSemver(self, true) || (semver(self, true).major() == semver(oldSelf, true).major() && semver(self, true).minor() <= semver(oldSelf, true).minor() + 1)",messageExpression="'cannot upgrade from ' + oldSelf + ' to ' + self + ': upgrade one minor version at a time'"
	// +optional
	Version string `json:"version,omitempty"`

	// AutoUpgrade lets fke upgrade the cluster on its own, inside the
	// maintenance window: none (default), patch (newer patches of the same
	// minor) or minor (also the next minor). A manual change of
	// spec.version is always allowed.
	// +kubebuilder:default=none
	// +optional
	AutoUpgrade AutoUpgradePolicy `json:"autoUpgrade,omitempty"`

	// Maintenance is when disruptive operations fke starts on its own
	// (automatic upgrades) may begin. Unset: at any time.
	// +optional
	Maintenance *MaintenanceWindow `json:"maintenance,omitempty"`

	// Runtime says where the control plane runs.
	// +kubebuilder:default=local
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="runtime is immutable"
	// +optional
	Runtime ControlPlaneRuntime `json:"runtime,omitempty"`

	// Datastore says where the cluster's etcd data lives: dedicated (an
	// etcd of its own) or shared (its own prefix, user and role in fke's
	// shared etcd; runtime hosted only). Immutable.
	// +kubebuilder:default=dedicated
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="datastore is immutable"
	// +optional
	Datastore Datastore `json:"datastore,omitempty"`

	// Network holds the cluster's address ranges. Immutable once set.
	// +kubebuilder:default={}
	// +optional
	Network ClusterNetwork `json:"network,omitempty"`

	// Addons selects what fke installs into the cluster and runs for it.
	// +kubebuilder:default={}
	// +optional
	Addons ClusterAddons `json:"addons,omitempty"`

	// Autoscaling holds the cluster-wide settings of the node autoscaler.
	// +kubebuilder:default={}
	// +optional
	Autoscaling ClusterAutoscaling `json:"autoscaling,omitempty"`

	// Backup takes etcd snapshots of the cluster on a schedule.
	// +optional
	Backup *ClusterBackup `json:"backup,omitempty"`

	// RestoreFrom makes a new cluster from a snapshot of another one: same
	// CA and keys, the snapshot's objects. Set at creation only.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="restoreFrom is immutable: it only says what a cluster was created from"
	// +optional
	RestoreFrom *ClusterRestore `json:"restoreFrom,omitempty"`
}

// AutoUpgradePolicy says which upgrades fke starts on its own.
// +kubebuilder:validation:Enum=none;patch;minor
type AutoUpgradePolicy string

const (
	AutoUpgradeNone  AutoUpgradePolicy = "none"
	AutoUpgradePatch AutoUpgradePolicy = "patch"
	AutoUpgradeMinor AutoUpgradePolicy = "minor"
)

// MaintenanceWindow is a recurring time window, in UTC.
type MaintenanceWindow struct {
	// Start is the time of day the window opens, HH:MM in UTC.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// Duration is how long the window stays open, 30m to 24h.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('30m') && duration(self) <= duration('24h')",message="maintenance duration must be between 30m and 24h, such as 4h"
	Duration metav1.Duration `json:"duration"`
	// Days are the weekdays the window opens on (Mon ... Sun); empty: every day.
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +optional
	Days []Weekday `json:"days,omitempty"`
}

// Weekday is a day of the week, as its three-letter English name.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// ClusterBackup schedules etcd snapshots.
type ClusterBackup struct {
	// Schedule is a cron expression (5 fields, or @hourly, @daily, @every 6h)
	// in UTC; empty takes snapshots on request only (fke cluster backup).
	// +kubebuilder:validation:MaxLength=100
	// +optional
	Schedule string `json:"schedule,omitempty"`
	// Retain is how many snapshots are kept (the oldest go first); default 7.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Retain int32 `json:"retain,omitempty"`
	// S3 keeps a copy of each snapshot in a bucket of an S3-compatible
	// object store (AWS S3, MinIO, Ceph RGW, ...): once a snapshot is taken
	// and checked, its data and checksum are uploaded, and retain prunes
	// the bucket too. Snapshots restore from there when the local copy is
	// gone.
	// +optional
	S3 *S3Store `json:"s3,omitempty"`
}

// S3Store is a bucket of an S3-compatible object store. A cluster's
// snapshots are the objects <prefix>/<namespace>/<cluster>/<snapshot>.db
// and .json (time, size, SHA-256, revision).
// +kubebuilder:validation:XValidation:rule="!(has(self.insecureSkipTLSVerify) && self.insecureSkipTLSVerify && has(self.caBundle))",message="set caBundle (to trust the store's certificate) or insecureSkipTLSVerify (to not check it), not both"
type S3Store struct {
	// Endpoint is the store's URL, scheme and host (and port) only:
	// https://s3.eu-west-1.amazonaws.com, or http://127.0.0.1:9000 for a
	// store without TLS.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != '' && url(self).getEscapedPath() in ['', '/'] && size(url(self).getQuery()) == 0",message="endpoint must be the store's http:// or https:// URL without a path or query, such as https://s3.us-east-1.amazonaws.com or http://127.0.0.1:9000"
	Endpoint string `json:"endpoint"`
	// Bucket is the bucket the snapshots go to; it must exist (fke does
	// not create it).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$') && !self.contains('..')",message="bucket must be a valid S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, beginning and ending with a letter or digit"
	Bucket string `json:"bucket"`
	// Prefix is put before <namespace>/<cluster>/ in the snapshots' keys;
	// default "fke". Clusters sharing a bucket and prefix never share a
	// folder.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.contains('//') && !self.split('/').exists(p, p == '.' || p == '..')",message="prefix is a relative key prefix such as backups/fke: no leading or trailing '/', no empty, '.' or '..' parts"
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// Region is the store's region, used to sign requests; default us-east-1.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+$`
	// +optional
	Region string `json:"region,omitempty"`
	// SecretRef names a Secret in the cluster's namespace that holds the
	// store's credentials: keys "accessKeyID" and "secretAccessKey" (and
	// "sessionToken" for temporary credentials). Credentials are never
	// written in the Cluster itself.
	SecretRef LocalObjectReference `json:"secretRef"`
	// CABundle is PEM certificates of the authorities that sign the store's
	// serving certificate, trusted besides the system's (an https endpoint
	// with a private CA).
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// InsecureSkipTLSVerify does not check the store's certificate (for
	// tests only: anyone on the path can read and change the snapshots).
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`
}

// S3DefaultPrefix and S3DefaultRegion are what an S3Store without prefix
// or region uses.
const (
	S3DefaultPrefix = "fke"
	S3DefaultRegion = "us-east-1"
)

// Keys of the Secret an S3Store's secretRef names.
const (
	S3AccessKeyIDKey     = "accessKeyID"
	S3SecretAccessKeyKey = "secretAccessKey"
	// S3SessionTokenKey is optional (temporary credentials).
	S3SessionTokenKey = "sessionToken"
)

// BackupLocation is where a copy of a snapshot is kept.
// +kubebuilder:validation:Enum=local;s3
type BackupLocation string

const (
	// BackupLocal: the management plane's data directory.
	BackupLocal BackupLocation = "local"
	// BackupS3: the S3-compatible store of spec.backup.s3.
	BackupS3 BackupLocation = "s3"
)

// ClusterRestore names the snapshot a cluster is restored from.
type ClusterRestore struct {
	// Cluster is the cluster (in the same namespace) the snapshot was taken of.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// Snapshot is the snapshot's name (fke cluster backups CLUSTER).
	// +kubebuilder:validation:MinLength=1
	Snapshot string `json:"snapshot"`
}

// BackupRecord is one snapshot of a cluster's etcd.
type BackupRecord struct {
	// Name identifies the snapshot, e.g. 20261201T120000Z.
	Name string `json:"name"`
	// Time is when it was taken.
	Time metav1.Time `json:"time"`
	// Size is its size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the checksum of the snapshot file, checked before any restore.
	SHA256 string `json:"sha256"`
	// Revision is the etcd revision it holds.
	Revision int64 `json:"revision,omitempty"`
	// Locations are where a copy is kept: local (the data directory), s3
	// (the store of spec.backup.s3), or both.
	// +listType=set
	// +optional
	Locations []BackupLocation `json:"locations,omitempty"`
}

// ClusterNetwork holds the address ranges of a cluster. Pod and Service
// ranges must not overlap; the admission webhook also checks that the pod
// range holds a /24 for every node the cluster's pools may reach.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podCIDR) || (has(self.podCIDR) && self.podCIDR == oldSelf.podCIDR)",message="podCIDR is immutable once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serviceCIDR) || (has(self.serviceCIDR) && self.serviceCIDR == oldSelf.serviceCIDR)",message="serviceCIDR is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.podCIDR) || !has(self.serviceCIDR) || !isCIDR(self.podCIDR) || !isCIDR(self.serviceCIDR) || !(cidr(self.podCIDR).containsCIDR(self.serviceCIDR) || cidr(self.serviceCIDR).containsCIDR(self.podCIDR))",messageExpression="'podCIDR ' + self.podCIDR + ' and serviceCIDR ' + self.serviceCIDR + ' overlap: pods and Services need separate ranges, such as podCIDR 10.112.0.0/12 and serviceCIDR 10.96.0.0/16'"
type ClusterNetwork struct {
	// PodCIDR is the range pod IPs are taken from; each node gets a /24 of it.
	// When empty, fke picks a /14 (1,024 nodes) that overlaps no route of
	// the host and no other cluster's ranges, and records it here. Set once.
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).prefixLength() <= 20",message="podCIDR must be an IPv4 CIDR of /20 or larger, such as 10.112.0.0/12"
	// +kubebuilder:validation:MaxLength=43
	// +optional
	PodCIDR string `json:"podCIDR,omitempty"`

	// ServiceCIDR is the range Service cluster IPs are taken from.
	// +kubebuilder:default="10.96.0.0/16"
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).prefixLength() >= 12",message="serviceCIDR must be an IPv4 CIDR with a prefix of /12 or longer, such as 10.96.0.0/16"
	// +kubebuilder:validation:MaxLength=43
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
}

// ClusterAddons selects the addons fke installs into a tenant cluster. An
// addon that serves the tenant's API server (an aggregated API or an
// admission webhook) runs beside the control plane as a supervised process
// of the cluster, so it works whatever nodes the cluster has (kwok nodes
// only, or none); what it needs inside the cluster (APIService, Service,
// RBAC) is kept in place by fke-manager, which repairs it when deleted and
// removes it when the addon is turned off. status.addons reports each one.
// +kubebuilder:validation:XValidation:rule="!has(self.verticalPodAutoscaler) || !has(self.verticalPodAutoscaler.enabled) || !self.verticalPodAutoscaler.enabled || !has(self.metricsServer) || !has(self.metricsServer.enabled) || self.metricsServer.enabled",message="the vertical pod autoscaler reads usage from metrics-server: keep metricsServer enabled, or turn verticalPodAutoscaler off"
type ClusterAddons struct {
	// GPUAgent configures the fke GPU node agent on GPU nodes.
	// +optional
	GPUAgent GPUAgentAddon `json:"gpuAgent,omitempty"`
	// MetricsServer serves the resource metrics API (metrics.k8s.io), which
	// `kubectl top` and HorizontalPodAutoscalers on CPU and memory read. On
	// by default.
	// +kubebuilder:default={}
	// +optional
	MetricsServer MetricsServerAddon `json:"metricsServer,omitempty"`
	// GPUMetrics serves per-pod GPU metrics under their DCGM names
	// (DCGM_FI_DEV_GPU_UTIL, ...) on the custom metrics API
	// (custom.metrics.k8s.io), which HorizontalPodAutoscalers read. On by
	// default.
	// +kubebuilder:default={}
	// +optional
	GPUMetrics GPUMetricsAddon `json:"gpuMetrics,omitempty"`
	// VerticalPodAutoscaler runs the upstream Vertical Pod Autoscaler
	// (recommender, updater, admission controller) for the cluster. Off by
	// default; it reads usage from metrics-server, which must stay on.
	// +optional
	VerticalPodAutoscaler VerticalPodAutoscalerAddon `json:"verticalPodAutoscaler,omitempty"`
}

// MetricsServerAddon configures metrics-server (sigs.k8s.io/metrics-server).
type MetricsServerAddon struct {
	// Enabled runs metrics-server for the cluster (default true); false
	// removes it and its APIService.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// IsEnabled reports whether metrics-server runs: Enabled, true when unset.
func (a MetricsServerAddon) IsEnabled() bool { return a.Enabled == nil || *a.Enabled }

// GPUMetricsAddon configures fke's GPU custom-metrics adapter
// (fke-gpu-metrics, built on sigs.k8s.io/custom-metrics-apiserver).
type GPUMetricsAddon struct {
	// Enabled runs the adapter for the cluster (default true); false
	// removes it and its APIService.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// IsEnabled reports whether the GPU metrics adapter runs: Enabled, true
// when unset.
func (a GPUMetricsAddon) IsEnabled() bool { return a.Enabled == nil || *a.Enabled }

// VerticalPodAutoscalerAddon configures the upstream Vertical Pod
// Autoscaler (k8s.io/autoscaler/vertical-pod-autoscaler).
type VerticalPodAutoscalerAddon struct {
	// Enabled runs the VPA for the cluster (default false); false removes
	// it, its webhook and RBAC (the VerticalPodAutoscaler CRDs and objects
	// stay).
	// +optional
	Enabled bool `json:"enabled,omitempty"`
}

// GPUSharingStrategy says how physical GPUs are shared between pods.
// +kubebuilder:validation:Enum=none;time-slicing;mps
type GPUSharingStrategy string

// MIGStrategy says how MIG devices are exposed: none, single or mixed.
// +kubebuilder:validation:Enum=none;single;mixed
type MIGStrategy string

// GPUAgentAddon configures GPU discovery, sharing and MIG on a cluster's GPU nodes.
// +kubebuilder:validation:XValidation:rule="self.sharing != 'none' || !has(self.replicas) || self.replicas == 1",message="replicas > 1 needs sharing time-slicing or mps"
type GPUAgentAddon struct {
	// Sharing is the GPU sharing strategy.
	// +kubebuilder:default=none
	// +optional
	Sharing GPUSharingStrategy `json:"sharing,omitempty"`
	// Replicas is how many pods may share one GPU when sharing is enabled.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// MIGStrategy says how MIG devices are exposed.
	// +kubebuilder:default=none
	// +optional
	MIGStrategy MIGStrategy `json:"migStrategy,omitempty"`
}

// Expander chooses between node pools that could all host pending pods.
// +kubebuilder:validation:Enum=least-waste;price;priority;random
type Expander string

const (
	ExpanderLeastWaste Expander = "least-waste"
	ExpanderPrice      Expander = "price"
	ExpanderPriority   Expander = "priority"
	ExpanderRandom     Expander = "random"
)

// ClusterAutoscaling holds cluster-wide node autoscaler settings.
type ClusterAutoscaling struct {
	// ScanInterval is how often the autoscaler re-evaluates the cluster.
	// +kubebuilder:default="10s"
	// +optional
	ScanInterval *metav1.Duration `json:"scanInterval,omitempty"`
	// Expander picks among pools that fit pending pods.
	// +kubebuilder:default=least-waste
	// +optional
	Expander Expander `json:"expander,omitempty"`
	// MaxNodes caps the number of nodes in the cluster (0: no cap).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxNodes int32 `json:"maxNodes,omitempty"`
	// MaxGPUs caps the number of GPUs in the cluster (0: no cap).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxGPUs int32 `json:"maxGPUs,omitempty"`
}

// ClusterPorts are the loopback ports a local control plane listens on.
// A hosted one sets only the addons' (MetricsServer, GPUMetrics and
// VPAWebhook): the ports they listen on in their pods.
type ClusterPorts struct {
	APIServer         int32 `json:"apiServer,omitempty"`
	EtcdClient        int32 `json:"etcdClient,omitempty"`
	EtcdPeer          int32 `json:"etcdPeer,omitempty"`
	ControllerManager int32 `json:"controllerManager,omitempty"`
	Scheduler         int32 `json:"scheduler,omitempty"`
	// MetricsServer is the port metrics-server serves on beside the control plane.
	MetricsServer int32 `json:"metricsServer,omitempty"`
	// GPUMetrics is the port the GPU metrics adapter serves on beside the
	// control plane.
	GPUMetrics int32 `json:"gpuMetrics,omitempty"`
	// VPAWebhook is the port the VPA admission controller serves its
	// webhook on beside the control plane.
	VPAWebhook int32 `json:"vpaWebhook,omitempty"`
}

// ClusterStatus is the observed state of a Cluster.
type ClusterStatus struct {
	// ObservedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is a one-word summary: Provisioning, Ready, Deleting or Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Endpoint is the URL of the cluster's kube-apiserver.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// Version is the Kubernetes version the API server reports.
	// +optional
	Version string `json:"version,omitempty"`
	// ControlPlane lists the control-plane components with the version each
	// runs: during an upgrade they differ.
	// +listType=map
	// +listMapKey=name
	// +optional
	ControlPlane []ComponentVersion `json:"controlPlane,omitempty"`
	// Upgrade is the last (or current) control-plane upgrade.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`
	// KubeconfigSecret names the Secret (key "value") holding the admin kubeconfig.
	// +optional
	KubeconfigSecret string `json:"kubeconfigSecret,omitempty"`
	// Ports are the loopback ports of a local control plane, kept across restarts.
	// +optional
	Ports ClusterPorts `json:"ports,omitempty"`
	// Addons is the state of each addon fke manages for the cluster, enabled
	// or being removed.
	// +listType=map
	// +listMapKey=name
	// +optional
	Addons []AddonStatus `json:"addons,omitempty"`
	// Backups are the snapshots kept, oldest first.
	// +optional
	Backups []BackupRecord `json:"backups,omitempty"`
	// BackupRequest is the last fke.dev/backup-requested value handled.
	// +optional
	BackupRequest string `json:"backupRequest,omitempty"`
	// RestoreRequest is the last fke.dev/restore-in-place value handled.
	// +optional
	RestoreRequest string `json:"restoreRequest,omitempty"`
	// Conditions: ControlPlaneReady, AddonsReady, Ready, BackupSucceeded,
	// BackupUploaded, Upgrading, Restored.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ComponentVersion is a control-plane component and the version it runs.
type ComponentVersion struct {
	// Name is the component, e.g. kube-apiserver.
	Name string `json:"name"`
	// Version is the Kubernetes version it runs (empty for etcd).
	// +optional
	Version string `json:"version,omitempty"`
	// Ready says whether it serves.
	Ready bool `json:"ready"`
}

// UpgradeStatus follows one control-plane upgrade.
type UpgradeStatus struct {
	// From is the version the control plane ran before.
	From string `json:"from"`
	// To is the version it is upgraded to.
	To string `json:"to"`
	// Step is where the upgrade is: Snapshot, kube-apiserver,
	// kube-controller-manager, kube-scheduler, Addons or Done.
	Step string `json:"step"`
	// Snapshot is the etcd snapshot taken before any component changed.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// StartTime is when the upgrade began.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when every component ran To.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Message says what failed, when a step failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// AddonPhase is where an addon is: Installing, Ready, Failed or Removing.
// +kubebuilder:validation:Enum=Installing;Ready;Failed;Removing
type AddonPhase string

const (
	// AddonInstalling: the addon is being installed or waits to be ready.
	AddonInstalling AddonPhase = "Installing"
	// AddonReady: the addon is installed and serves.
	AddonReady AddonPhase = "Ready"
	// AddonFailed: installing or running the addon failed; message says why.
	AddonFailed AddonPhase = "Failed"
	// AddonRemoving: the addon was turned off and is being removed.
	AddonRemoving AddonPhase = "Removing"
)

// AddonStatus is the observed state of one addon of a Cluster.
type AddonStatus struct {
	// Name is the addon's name, e.g. metrics-server.
	Name string `json:"name"`
	// Phase says where the addon is.
	Phase AddonPhase `json:"phase"`
	// Version is the upstream version fke runs, e.g. v0.8.0.
	// +optional
	Version string `json:"version,omitempty"`
	// Message says what the addon serves or waits for.
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Phase last changed.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// Cluster is a tenant Kubernetes cluster whose control plane fke runs.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fkc,categories=fke
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="cluster name must be a DNS label of at most 40 characters: lowercase letters, digits and '-', starting with a letter"
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	Spec   ClusterSpec   `json:"spec,omitempty"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Cluster{}, &ClusterList{})
}
