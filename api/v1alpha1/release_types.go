package v1alpha1

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReleaseSpec says what to deploy from git and where, stage by stage.
type ReleaseSpec struct {
	// Source is the git repository, revision and path to render.
	Source ReleaseSource `json:"source"`

	// Stages are the groups of target clusters, in promotion order: a stage
	// gets a revision only once the stage before it has been healthy with
	// it for the stage's soak time (and, if the stage asks for it, after an
	// approval).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +listType=map
	// +listMapKey=name
	Stages []ReleaseStage `json:"stages"`

	// Namespace is given to namespaced objects of the source that have none.
	// +kubebuilder:default=default
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Interval is how often the repository is polled for new commits (and
	// the targets checked for health and drift).
	// +kubebuilder:default="1m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="interval must be at least 1s, such as 30s or 5m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Timeout is how long a sync waits for every object of a target to be
	// Current before the stage counts as failed and rolls back.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="timeout must be at least 1s, such as 2m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// UnhealthyTimeout is how long a target may stay unhealthy (its objects
	// InProgress or Failed) with a revision its stage was healthy with
	// before the stage rolls back to the revision it was healthy with
	// before that one, and the revision is not promoted further. A target
	// whose cluster cannot be read, or whose objects were deleted (drift),
	// does not count as unhealthy.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="unhealthyTimeout must be between 1s and 24h, such as 5m"
	// +optional
	UnhealthyTimeout *metav1.Duration `json:"unhealthyTimeout,omitempty"`

	// Suspend stops fetching and applying (fke release suspend); the targets
	// keep what they run.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// CorrectDrift applies the source again when an object was changed by
	// hand; without it drift is only reported.
	// +optional
	CorrectDrift bool `json:"correctDrift,omitempty"`
}

// ReleaseSource is a path in a git repository at a revision.
// +kubebuilder:validation:XValidation:rule="!has(self.secretRef) || !self.url.startsWith('file://')",message="secretRef is for https:// and ssh:// repositories; a file:// repository needs none"
type ReleaseSource struct {
	// URL of the repository: https://..., ssh://user@host/... or file:///path.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('ssh://') || self.startsWith('file:///')",message="url must start with https://, ssh:// or file:/// (for example https://github.com/org/app.git or file:///srv/git/app)"
	URL string `json:"url"`

	// Revision is a branch, a tag or a full commit hash.
	// +kubebuilder:default=main
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Revision string `json:"revision,omitempty"`

	// Path is the directory (or file) in the repository to render: plain
	// manifests, a kustomization or a Helm chart.
	// +kubebuilder:default="."
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="path is relative to the repository root and may not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// SecretRef names a Secret in the Release's namespace with the
	// credentials: key "token" (and optionally "username") for https, key
	// "identity" (a private key) and "known_hosts" for ssh; "ca.crt" (PEM)
	// for an https server whose certificate a private CA signed.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Values are Helm values (a chart only).
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// ValuesFiles are Helm values files in the repository, merged in order
	// before Values: paths relative to the repository root (not to Path),
	// which may not leave it.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.all(f, !f.startsWith('/') && !f.contains('..'))",message="valuesFiles are relative to the repository root and may not contain '..'"
	// +optional
	ValuesFiles []string `json:"valuesFiles,omitempty"`

	// Set are Helm --set expressions, applied last.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Set []string `json:"set,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ReleaseStage is one group of target clusters.
// +kubebuilder:validation:XValidation:rule="(has(self.clusters) && size(self.clusters) > 0) || has(self.selector)",message="a stage names its clusters or gives a selector"
type ReleaseStage struct {
	// Name of the stage, such as dev or prod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Clusters are names of Clusters in the Release's namespace.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Clusters []string `json:"clusters,omitempty"`

	// Selector picks Clusters of the Release's namespace by label, in
	// addition to Clusters.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// Soak is how long the stage before this one must have been healthy
	// with a revision before this stage gets it (ignored on the first
	// stage).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="soak may not be negative"
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`

	// Path, when set, is rendered for this stage instead of source.path
	// (the stage's own overlay, such as overlays/prod): the same commit is
	// promoted, each stage renders its own directory of it.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="path is relative to the repository root and may not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// RequireApproval holds a revision until it is approved for this stage
	// (fke release approve NAME --stage STAGE).
	// +optional
	RequireApproval bool `json:"requireApproval,omitempty"`
}

// ReleaseStatus reports the source, each stage and each target.
type ReleaseStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Revision is the newest commit of the source that rendered: what the
	// first stage follows.
	// +optional
	Revision string `json:"revision,omitempty"`
	// LastAttemptedRevision is the newest commit fetched, rendered or not.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`
	// LastFetched is when the repository was last fetched.
	// +optional
	LastFetched *metav1.Time `json:"lastFetched,omitempty"`
	// SyncRequest echoes the last fke.dev/sync-requested annotation handled.
	// +optional
	SyncRequest string `json:"syncRequest,omitempty"`

	// Stages in the order of spec.stages.
	// +optional
	Stages []ReleaseStageStatus `json:"stages,omitempty"`

	// Conditions: SourceReady, Ready, Promoting, Drifted, Suspended.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ReleaseStageStatus is where one stage stands.
type ReleaseStageStatus struct {
	Name string `json:"name"`
	// Revision is the commit this stage runs (or is being moved to).
	// +optional
	Revision string `json:"revision,omitempty"`
	// Healthy is true when every target runs Revision and is Current.
	// +optional
	Healthy bool `json:"healthy,omitempty"`
	// HealthyRevision is the last revision every target was healthy with:
	// where a failed sync rolls back to.
	// +optional
	HealthyRevision string `json:"healthyRevision,omitempty"`
	// PreviousHealthyRevision is the revision the stage was healthy with
	// before HealthyRevision: where it goes back to when it turns unhealthy
	// with HealthyRevision for longer than spec.unhealthyTimeout.
	// +optional
	PreviousHealthyRevision string `json:"previousHealthyRevision,omitempty"`
	// HealthySince is when the stage became healthy with Revision.
	// +optional
	HealthySince *metav1.Time `json:"healthySince,omitempty"`
	// FailedRevision is the last revision that failed here; it is not
	// tried again and never promoted.
	// +optional
	FailedRevision string `json:"failedRevision,omitempty"`
	// Config is a digest of the render inputs (path, values, set, target
	// namespace) the stage was last synced with: when the Release's spec
	// changes them, the stage's revision is applied again with the new
	// inputs, and a revision that failed with the old ones may be tried.
	// +optional
	Config string `json:"config,omitempty"`
	// Pending is the revision this stage would get next and Waiting why it
	// has not yet (soak, approval, suspended).
	// +optional
	Pending string `json:"pending,omitempty"`
	// +optional
	Waiting string `json:"waiting,omitempty"`
	// Targets are the stage's clusters.
	// +optional
	Targets []ReleaseTargetStatus `json:"targets,omitempty"`
}

// ReleaseTargetStatus is one target cluster of a stage.
type ReleaseTargetStatus struct {
	// Cluster is the Cluster's name.
	Cluster string `json:"cluster"`
	// Revision is the commit last applied there successfully.
	// +optional
	Revision string `json:"revision,omitempty"`
	// DeployRevision is the revision number `fke releases` shows in the
	// cluster for it.
	// +optional
	DeployRevision int `json:"deployRevision,omitempty"`
	// Health is the kstatus of the applied objects taken together:
	// Current, InProgress, Failed, NotFound or Unknown (cluster not reachable).
	// +optional
	Health string `json:"health,omitempty"`
	// Message says what is wrong when Health is not Current.
	// +optional
	Message string `json:"message,omitempty"`
	// UnhealthySince is when the target's objects stopped being Current
	// (InProgress or Failed); unset while they are Current, or cannot be
	// read.
	// +optional
	UnhealthySince *metav1.Time `json:"unhealthySince,omitempty"`
	// Drift lists the objects changed by hand since they were applied.
	// +optional
	Drift []string `json:"drift,omitempty"`
	// LastApplied is when Revision was applied.
	// +optional
	LastApplied *metav1.Time `json:"lastApplied,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rel;rels
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="a Release name has at most 50 characters (it names the inventory and revision Secrets in each target)"
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Release deploys a path of a git repository to clusters, stage by stage.
type Release struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ReleaseSpec   `json:"spec,omitempty"`
	Status ReleaseStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ReleaseList is a list of Releases.
type ReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Release `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Release{}, &ReleaseList{})
}

// Release condition types.
const (
	// ConditionSourceReady is True when the source fetched and rendered;
	// False names the problem (RepositoryUnreachable, RevisionNotFound,
	// PathNotFound, PathOutsideSource, RenderFailed, AuthFailed).
	ConditionSourceReady = "SourceReady"
	// ConditionPromoting is False when a stage rolled back (a sync did not
	// become healthy, or a stage healthy with a revision turned unhealthy
	// for longer than spec.unhealthyTimeout) and promotion stopped.
	ConditionPromoting = "Promoting"
	// ConditionDrifted is True when objects in a target were changed by hand.
	ConditionDrifted = "Drifted"
	// ConditionSuspended is True while spec.suspend is set.
	ConditionSuspended = "Suspended"
)

// Release condition reasons.
const (
	ReasonRepositoryUnreachable = "RepositoryUnreachable"
	ReasonRevisionNotFound      = "RevisionNotFound"
	ReasonAuthFailed            = "AuthFailed"
	ReasonPathNotFound          = "PathNotFound"
	// ReasonPathOutsideSource: a path the Release or its source names
	// (valuesFiles, a kustomization's resources, a chart's or a
	// manifest's symbolic link) leads out of the repository.
	ReasonPathOutsideSource = "PathOutsideSource"
	ReasonRenderFailed      = "RenderFailed"
	ReasonFetched           = "Fetched"
	ReasonRolledBack        = "RolledBack"
	ReasonSyncFailed        = "SyncFailed"
	ReasonPromoted          = "Promoted"
	ReasonWaiting           = "Waiting"
	ReasonDriftDetected     = "DriftDetected"
	ReasonDriftCorrected    = "DriftCorrected"
	ReasonNoDrift           = "NoDrift"
	ReasonSuspended         = "Suspended"
	ReasonActive            = "Active"
	ReasonUnhealthy         = "Unhealthy"
)

// Annotations on a Release.
const (
	// AnnotationSyncRequested asks for a fetch and sync now (fke release
	// sync); any new value (a time) does.
	AnnotationSyncRequested = "fke.dev/sync-requested"
	// AnnotationApprovePrefix + stage holds the revision approved for that
	// stage (fke release approve NAME --stage STAGE).
	AnnotationApprovePrefix = "approve.fke.dev/"
)

// DefaultReleaseInterval and DefaultReleaseTimeout apply when a Release
// leaves them unset.
const (
	DefaultReleaseInterval         = time.Minute
	DefaultReleaseTimeout          = 5 * time.Minute
	DefaultReleaseUnhealthyTimeout = 5 * time.Minute
)

// PollInterval is how often the Release's source is polled.
func (r *Release) PollInterval() time.Duration {
	if r.Spec.Interval != nil && r.Spec.Interval.Duration > 0 {
		return r.Spec.Interval.Duration
	}
	return DefaultReleaseInterval
}

// SyncTimeout is how long a sync waits for its objects to be Current.
func (r *Release) SyncTimeout() time.Duration {
	if r.Spec.Timeout != nil && r.Spec.Timeout.Duration > 0 {
		return r.Spec.Timeout.Duration
	}
	return DefaultReleaseTimeout
}

// UnhealthyTimeoutDuration is how long a target may be unhealthy with a
// revision its stage was healthy with before the stage rolls back.
func (r *Release) UnhealthyTimeoutDuration() time.Duration {
	if r.Spec.UnhealthyTimeout != nil && r.Spec.UnhealthyTimeout.Duration > 0 {
		return r.Spec.UnhealthyTimeout.Duration
	}
	return DefaultReleaseUnhealthyTimeout
}

// SoakTime is how long the stage before s must be healthy with a revision.
func (s ReleaseStage) SoakTime() time.Duration {
	if s.Soak == nil {
		return 0
	}
	return s.Soak.Duration
}
