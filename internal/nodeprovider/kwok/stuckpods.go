package kwok

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"fke.dev/fke/internal/tenant"
)

// Why the provider re-drives pods that kwok leaves Pending:
//
// kwok plays a pod's stages only from a watch event of that pod. When it
// started its node controller before its pod controller (a random order,
// fixed for the life of the process), it also skips a pod's events as
// "read only" until its Lease cache holds the Lease it created for the
// pod's node; and it resyncs a node's pods only once, right after creating
// that Lease. A pod bound before that resync whose resync event kwok
// handles before the Lease reaches its cache, or one whose binding kwok
// sees between the resync and the Lease reaching its cache, is skipped
// and gets no other event: a Pending pod is not written again until its
// kubelet (here kwok) writes it, so it stays Pending, without a container
// status, for as long as kwok runs (sigs.k8s.io/kwok v0.8.0, the version
// fke pins; TestPodsBindingWhileNodesRegister reproduces it with many
// nodes registering while pods are bound to them). The Lease reaches kwok's
// cache up to a second or two after kwok creates it when the API server is
// busy, long enough for the scheduler to bind a pod to the node kwok has
// just made Ready.
//
// The provider watches the pods bound to a node and Pending, and when one
// on a kwok node has no container status StuckPodAfter after it was first
// seen so, it writes an annotation (AnnotationRedriven) on it: the new
// watch event makes kwok, whose Lease cache has caught up by then, play the
// pod. It records a Warning event on the pod and counts the pod in
// fke_kwok_stuck_pods_total. A pod still stuck is re-driven again, each
// time after twice as long, up to maxRedriveInterval.

// AnnotationRedriven on a pod is when the kwok provider last re-drove it:
// kwok had left it Pending on its node (see above).
const AnnotationRedriven = "fke.dev/kwok-redriven-at"

// EventReasonStuckOnKwokNode is the reason of the Warning event on a pod
// that kwok left Pending and the provider re-drove.
const EventReasonStuckOnKwokNode = "StuckOnKwokNode"

const (
	// DefaultStuckPodAfter is how long a pod bound to a kwok node may stay
	// Pending without a container status before it is re-driven: kwok
	// plays a pod within a second, several under the load of a thousand
	// nodes.
	DefaultStuckPodAfter = 15 * time.Second
	// maxRedriveInterval bounds the wait between two re-drives of a pod.
	maxRedriveInterval = 5 * time.Minute
	// minScanInterval bounds how often the pods are looked at.
	minScanInterval = time.Second
	// redriveController names the provider in the events it records.
	redriveController = "fke.dev/kwok-provider"
)

// stuckPods counts the pods kwok left Pending that the provider re-drove.
var stuckPods = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fke_kwok_stuck_pods_total",
	Help: "Pods bound to a kwok node that kwok left Pending and the kwok provider re-drove (each pod once, however many times it was re-driven).",
}, []string{"cluster"})

func init() {
	metrics.Registry.MustRegister(stuckPods)
}

// waitingForKwok reports whether pod is bound to a node, Pending, not being
// deleted and without any container status: its kubelet (kwok) has not
// played it yet. Pure.
func waitingForKwok(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodPending && pod.DeletionTimestamp == nil &&
		len(pod.Status.ContainerStatuses) == 0 && len(pod.Status.InitContainerStatuses) == 0
}

// podTrack is what the redriver knows of a pod waiting for kwok.
type podTrack struct {
	// seen is when the pod was first seen waiting for kwok.
	seen time.Time
	// redriven is the last re-drive; zero before the first.
	redriven time.Time
	// attempts counts the re-drives.
	attempts int
	// notKwok: the pod's node is not a kwok node (or is gone).
	notKwok bool
}

// redriveDue reports whether a pod tracked as tr is due for a re-drive at
// now: after it has waited for kwok for after, then twice as long after
// each re-drive, up to maxRedriveInterval. Pure.
func redriveDue(tr podTrack, now time.Time, after time.Duration) bool {
	if tr.notKwok {
		return false
	}
	if tr.attempts == 0 {
		return now.Sub(tr.seen) >= after
	}
	wait := after
	for range tr.attempts {
		wait *= 2
		if wait >= maxRedriveInterval {
			wait = maxRedriveInterval
			break
		}
	}
	return now.Sub(tr.redriven) >= wait
}

// redriver re-drives the pods of one cluster that kwok leaves Pending (see
// above). It runs from start until its context ends.
type redriver struct {
	client     kubernetes.Interface
	clusterKey string
	after      time.Duration
	log        *slog.Logger
	now        func() time.Time

	tracks map[types.UID]*podTrack // by pod; used by the scan loop only
}

// startRedriver starts a redriver of the cluster with key over client; the
// returned function stops it without waiting (a watch of an API server
// that is gone can take a second to end).
func startRedriver(ctx context.Context, client kubernetes.Interface, clusterKey string, after time.Duration, log *slog.Logger) (stop func()) {
	r := &redriver{client: client, clusterKey: clusterKey, after: after, log: log, now: time.Now, tracks: map[types.UID]*podTrack{}}
	ctx, cancel := context.WithCancel(ctx)
	go r.run(ctx)
	return cancel
}

// run watches the pods bound to a node and Pending, and scans them every
// quarter of r.after until ctx ends.
func (r *redriver) run(ctx context.Context) {
	selector := fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermEqualSelector("status.phase", string(corev1.PodPending)),
	).String()
	pods := r.client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return pods.Watch(ctx, opts)
		},
	}
	store, informer := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler:       toolscache.ResourceEventHandlerFuncs{},
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { informer.RunWithContext(ctx) })
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return
	}
	ticker := time.NewTicker(max(r.after/4, minScanInterval))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			r.scan(ctx, store.List())
		}
	}
}

// scan tracks the pods among objs waiting for kwok and re-drives those due.
func (r *redriver) scan(ctx context.Context, objs []any) {
	now := r.now()
	live := make(map[types.UID]bool, len(objs))
	kwokNodes := map[string]bool{} // node name: a kwok node; looked up once a scan
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !waitingForKwok(pod) {
			continue
		}
		live[pod.UID] = true
		tr := r.tracks[pod.UID]
		if tr == nil {
			tr = &podTrack{seen: now}
			r.tracks[pod.UID] = tr
		}
		if !redriveDue(*tr, now, r.after) {
			continue
		}
		r.redrive(ctx, pod, tr, now, kwokNodes)
	}
	for uid := range r.tracks {
		if !live[uid] {
			delete(r.tracks, uid)
		}
	}
}

// redrive writes AnnotationRedriven on pod if its node is a kwok node,
// records a Warning event on it and counts it the first time. kwokNodes
// caches what is known of nodes.
func (r *redriver) redrive(ctx context.Context, pod *corev1.Pod, tr *podTrack, now time.Time, kwokNodes map[string]bool) {
	log := r.log.With("cluster", r.clusterKey, "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName)
	isKwok, known := kwokNodes[pod.Spec.NodeName]
	if !known {
		node, err := r.client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			log.Warn("getting the node of a pending pod failed", "error", err)
			return
		default:
			isKwok = node.Annotations[AnnotationNode] == AnnotationNodeValue
		}
		kwokNodes[pod.Spec.NodeName] = isKwok
	}
	if !isKwok {
		tr.notKwok = true
		return
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationRedriven, now.UTC().Format(time.RFC3339Nano))
	_, err := r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	// Counted as an attempt either way: a failing API server is retried
	// with the same backoff.
	tr.attempts++
	tr.redriven = now
	if err != nil {
		log.Warn("re-driving a pod kwok left pending failed", "error", err, "attempt", tr.attempts)
		return
	}
	waited := now.Sub(tr.seen).Round(time.Second)
	if tr.attempts == 1 {
		stuckPods.WithLabelValues(r.clusterKey).Inc()
	}
	log.Warn("kwok left a pod pending on its node; re-driven", "waited", waited, "attempt", tr.attempts)
	msg := fmt.Sprintf("bound to kwok node %s and still Pending with no container started after %s: kwok has not played it; fke re-drove it (attempt %d)",
		pod.Spec.NodeName, waited, tr.attempts)
	ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	ev := tenant.NewEvent(ref, corev1.EventTypeWarning, EventReasonStuckOnKwokNode, msg, redriveController, now)
	if _, err := r.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.Warn("recording the event of a re-driven pod failed", "error", err)
	}
}
