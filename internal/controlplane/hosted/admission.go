package hosted

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controlplane"
)

// AnnotationStarted is set on a tenant's namespace when its control plane
// is let start (RFC 3339). Until its API server serves, the plane counts
// towards Options.MaxStarting.
const AnnotationStarted = "fke.dev/started-at"

// DefaultMaxStarting is how many control planes start at once unless
// Options.MaxStarting says otherwise. A plane's start is CPU-bound (its
// API servers decode and cache every resource, its etcd members elect):
// many at once on a small management cluster starve each other until
// startup probes kill API servers that are still starting, and none
// converges; two at a time converge there. The bound paces
// starts; it does not make room: a management cluster whose CPU its idle
// tenants already spend does not converge however the starts are queued
// (bench/README).
const DefaultMaxStarting = 2

// startDeadline is how long a started plane holds its place: one that
// does not serve by then (a wrong image, a node gone) no longer holds the
// planes queued behind it back.
const startDeadline = 5 * time.Minute

// planeStart is what admission reads of one tenant's control plane.
type planeStart struct {
	Key     string
	Created time.Time // its namespace's creation: the queue's order
	Started time.Time // zero: not started yet (queued)
	Serving bool      // an API server replica is available
}

// admit decides whether the plane of key may start at now, when at most
// max planes start at once. Planes start in the order they were created
// (by key among equals); a started plane counts until it serves or its
// startDeadline passes. It returns how many are starting and how many
// queued planes are ahead of key.
func admit(key string, planes []planeStart, now time.Time, max int) (ok bool, starting, ahead int) {
	var me *planeStart
	for i := range planes {
		if planes[i].Key == key {
			me = &planes[i]
		}
	}
	for _, p := range planes {
		switch {
		case p.Key == key:
		case !p.Started.IsZero():
			if !p.Serving && now.Sub(p.Started) < startDeadline {
				starting++
			}
		case me == nil || p.Created.Before(me.Created) || (p.Created.Equal(me.Created) && p.Key < key):
			ahead++
		}
	}
	return max <= 0 || starting+ahead < max, starting, ahead
}

// admitStart lets the plane of nsObj start, or returns why it waits (the
// queue's state, for the cluster's conditions). A plane let start once
// (annotated), or one whose API server Deployment exists, is not asked
// again.
func (r *Runtime) admitStart(ctx context.Context, nsObj *corev1.Namespace) (queued string, err error) {
	if nsObj.Annotations[AnnotationStarted] != "" {
		return "", nil
	}
	r.admitMu.Lock()
	defer r.admitMu.Unlock()
	now := time.Now()
	d := &appsv1.Deployment{}
	switch err := r.c.Get(ctx, client.ObjectKey{Namespace: nsObj.Name, Name: controlplane.APIServer}, d); {
	case err == nil:
		// Started by an fke that did not record starts.
		return "", r.annotate(ctx, nsObj, AnnotationStarted, d.CreationTimestamp.UTC().Format(time.RFC3339))
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("getting Deployment %s/%s: %w", nsObj.Name, controlplane.APIServer, err)
	}
	planes, err := r.planeStarts(ctx)
	if err != nil {
		return "", err
	}
	key := nsObj.Annotations[AnnotationCluster]
	ok, starting, ahead := admit(key, planes, now, r.opts.MaxStarting)
	if !ok {
		return fmt.Sprintf("queued: %d control planes starting and %d queued ahead of this one; at most %d start at once", starting, ahead, r.opts.MaxStarting), nil
	}
	r.log.Info("control plane let start", "cluster", key, "starting", starting, "max", r.opts.MaxStarting)
	return "", r.annotate(ctx, nsObj, AnnotationStarted, now.UTC().Format(time.RFC3339))
}

// planeStarts reads every tenant's namespace and API server Deployment.
func (r *Runtime) planeStarts(ctx context.Context) ([]planeStart, error) {
	var nss corev1.NamespaceList
	if err := r.c.List(ctx, &nss, client.HasLabels{LabelCluster}); err != nil {
		return nil, fmt.Errorf("listing the tenants' namespaces: %w", err)
	}
	var ds appsv1.DeploymentList
	if err := r.c.List(ctx, &ds, client.MatchingLabels{LabelComponent: controlplane.APIServer}); err != nil {
		return nil, fmt.Errorf("listing the tenants' API servers: %w", err)
	}
	serving := map[string]bool{}
	for _, d := range ds.Items {
		serving[d.Namespace] = d.Status.AvailableReplicas > 0
	}
	planes := make([]planeStart, 0, len(nss.Items))
	for _, ns := range nss.Items {
		if !ns.DeletionTimestamp.IsZero() {
			continue
		}
		planes = append(planes, planeStart{
			Key: ns.Annotations[AnnotationCluster], Created: ns.CreationTimestamp.Time, Started: startedAt(&ns), Serving: serving[ns.Name],
		})
	}
	return planes, nil
}

// startedAt is when the plane of ns was let start (AnnotationStarted):
// zero if it was not, ns's creation if the annotation is unreadable.
func startedAt(ns *corev1.Namespace) time.Time {
	s := ns.Annotations[AnnotationStarted]
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return ns.CreationTimestamp.Time
	}
	return t
}
