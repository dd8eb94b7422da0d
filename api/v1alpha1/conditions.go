package v1alpha1

// NodeConditionGPUHealthMonitorFailed is the condition the GPU agent sets
// on its tenant Node while it cannot watch its GPUs' health; the machine
// controller reads it into the Machine's GPUReady.
const NodeConditionGPUHealthMonitorFailed = "GPUHealthMonitorFailed"

// Condition types. Every status carries metav1.Condition values with these types.
const (
	// ConditionReady summarises an object: True when it does what its spec asks.
	ConditionReady = "Ready"
	// ConditionControlPlaneReady is True when every control-plane component of a
	// Cluster answers its readiness check.
	ConditionControlPlaneReady = "ControlPlaneReady"
	// ConditionAddonsReady is True when the Cluster's addons are installed and ready.
	ConditionAddonsReady = "AddonsReady"
	// ConditionProvisioned is True when the provider created the Machine's instance.
	ConditionProvisioned = "Provisioned"
	// ConditionRegistered is True when the Machine's Node exists and is Ready.
	ConditionRegistered = "Registered"
	// ConditionGPUReady is True when the Node's allocatable GPUs match the instance type.
	ConditionGPUReady = "GPUReady"
	// ConditionScalingActive is True when a NodePool's size can be changed (not backing off).
	ConditionScalingActive = "ScalingActive"
	// ConditionRestored reports the last restore in place of a Cluster.
	ConditionRestored = "Restored"
	// ConditionBackupSucceeded says whether a Cluster's last etcd snapshot worked.
	ConditionBackupSucceeded = "BackupSucceeded"
	// ConditionBackupUploaded says whether a Cluster's snapshots reached the
	// S3-compatible store of spec.backup.s3 (reasons Uploaded, UploadFailed);
	// absent without a store. A failed upload leaves BackupSucceeded as it
	// is (the local snapshot is kept) and is tried again with the next
	// snapshot.
	ConditionBackupUploaded = "BackupUploaded"
	// ConditionRepairing is True on a Machine that auto-repair replaces; the
	// reason says why (NodeStartupTimeout, NodeNotReady, GPUUnhealthy).
	ConditionRepairing = "Repairing"
	// ConditionUpgrading is True on a Cluster whose control plane is being
	// upgraded (the reason is the step), False once it is done (Upgraded)
	// or when a step failed (UpgradeFailed, retried).
	ConditionUpgrading = "Upgrading"
	// ConditionRepairBlocked is True on a NodePool whose unhealthy machines
	// are left alone (too many unhealthy at once, or backing off).
	ConditionRepairBlocked = "RepairBlocked"
)

// Condition reasons shared by several kinds.
const (
	ReasonReady        = "Ready"
	ReasonProvisioning = "Provisioning"
	ReasonStarting     = "Starting"
	// ReasonQueued: the control plane waits for others to start first.
	ReasonQueued             = "Queued"
	ReasonComponentsNotReady = "ComponentsNotReady"
	// ReasonAdopting: a ready control plane's processes ran on through a
	// restart of fke-manager, and the new one is taking them over (its
	// condition stays True: nothing stopped).
	ReasonAdopting      = "Adopting"
	ReasonInternalError = "InternalError"
	ReasonDeleting      = "Deleting"
	ReasonInvalidSpec   = "InvalidSpec"
	// ReasonRestoreFailed: the snapshot a cluster is to be made from is missing or fails its checksum.
	ReasonRestoreFailed      = "RestoreFailed"
	ReasonClusterNotReady    = "ClusterNotReady"
	ReasonNodeNotFound       = "NodeNotFound"
	ReasonNodeNotReady       = "NodeNotReady"
	ReasonGPUsNotAllocatable = "GPUsNotAllocatable"
	// ReasonGPUHealthMonitorFailed: the node's GPU agent cannot watch its GPUs' health.
	ReasonGPUHealthMonitorFailed = "GPUHealthMonitorFailed"
	ReasonNoGPUs                 = "NoGPUs"
	ReasonScaling                = "Scaling"
	// ReasonInsufficientCapacity: the provider cannot make the instance type now.
	ReasonInsufficientCapacity = "InsufficientCapacity"
	// ReasonGPUAgentFailed: fke could not install the GPU agent of a pool of real GPU nodes.
	ReasonGPUAgentFailed = "GPUAgentFailed"
	// ReasonProvisionFailed: the provider failed to make the instance.
	ReasonProvisionFailed = "ProvisionFailed"
	// ReasonUploaded: every snapshot kept is in the S3-compatible store.
	ReasonUploaded = "Uploaded"
	// ReasonUploadFailed: copying snapshots to (or pruning) the
	// S3-compatible store failed; the local snapshots are kept.
	ReasonUploadFailed = "UploadFailed"
	// ReasonUpgraded: every control-plane component runs spec.version.
	ReasonUpgraded = "Upgraded"
	// ReasonUpgradeFailed: an upgrade step failed; the cluster serves at the
	// versions it ran and the step is retried.
	ReasonUpgradeFailed = "UpgradeFailed"
	// ReasonAddonsNotReady: a Cluster's addons are not installed or ready.
	ReasonAddonsNotReady = "AddonsNotReady"
	// ReasonAddonFailed: one of a Cluster's addons failed (status.addons says which and why).
	ReasonAddonFailed = "AddonFailed"
)

// Labels and annotations fke puts on objects it owns.
const (
	// LabelCluster names the Cluster a NodePool or Machine belongs to.
	LabelCluster = "fke.dev/cluster"
	// LabelNodePool names the NodePool a Machine or Node belongs to.
	LabelNodePool = "fke.dev/nodepool"
	// AnnotationDoNotDisrupt on a pod or node keeps the autoscaler from removing it.
	AnnotationDoNotDisrupt = "fke.dev/do-not-disrupt"
	// AnnotationScaleDown marks a Machine the autoscaler chose to remove; the
	// nodepool controller removes such machines first.
	AnnotationScaleDown = "fke.dev/scale-down"
	// AnnotationBackupRequested on a Cluster asks for an etcd snapshot now;
	// its value (any unique string, e.g. a time) is echoed in the
	// BackupSucceeded condition's message when it is taken.
	AnnotationBackupRequested = "fke.dev/backup-requested"
	// AnnotationRestoreInPlace on a Cluster asks to replace its objects with
	// one of its own snapshots: "SNAPSHOT@NONCE" (fke cluster restore
	// --in-place --yes). The Restored condition reports the outcome.
	AnnotationRestoreInPlace = "fke.dev/restore-in-place"
	// AnnotationRepairs on a NodePool lists its recent auto-repairs (unix
	// seconds, oldest first) for the repair backoff.
	AnnotationRepairs = "fke.dev/repairs"
	// AnnotationRenamedFrom on a NodePool names the pool object it was
	// renamed from when per-cluster pool names came in.
	AnnotationRenamedFrom = "fke.dev/renamed-from"
	// AnnotationSimulateGPULoad on a Deployment, StatefulSet, ReplicaSet or
	// pod is the GPU load offered to it, in GPU-equivalents (a decimal such
	// as "4.5"): the GPU metrics addon spreads it over the workload's Ready
	// pods to simulate their GPU metrics where no GPU agent reports them
	// (kwok nodes).
	AnnotationSimulateGPULoad = "fke.dev/simulate-gpu-load"
	// ClusterFinalizer guards the cleanup of a Cluster's control plane and data.
	ClusterFinalizer = "fke.dev/cluster"
	// NodePoolFinalizer guards the removal of a NodePool's Machines.
	NodePoolFinalizer = "fke.dev/nodepool"
	// MachineFinalizer guards the deletion of a Machine's instance and Node.
	MachineFinalizer = "fke.dev/machine"
)
