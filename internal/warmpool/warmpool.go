// Package warmpool decides what a pool of standby tenant control planes
// does: which plane a new cluster claims, when the pool starts another
// plane, and which planes it removes. The cluster controller carries the
// decisions out; this package holds no state and does no I/O.
//
// A standby plane is a whole control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) started before any cluster asks
// for it, with its own CAs, keys and data. A cluster created with the
// settings the pool's planes were made for claims one instead of starting
// its own: its API server answers at once. A plane is claimed at most once
// and never returns to the pool.
package warmpool

import (
	"slices"
	"time"
)

// Plane is what the pool knows of one standby plane.
type Plane struct {
	ID string
	// Shape is what the plane was made for; a cluster claims it only when
	// it asks for the same.
	Shape Shape
	// PodCIDR is the pod range the plane's controller manager allocates
	// from, picked when the plane was made.
	PodCIDR string
	// Ready: every component serves.
	Ready bool
	// ClaimedBy is the UID of the cluster that claimed the plane; empty
	// while it waits in the pool.
	ClaimedBy string
	Created   time.Time
}

// Shape is what makes two control planes interchangeable before a cluster
// owns one.
type Shape struct {
	// Version is the Kubernetes version of every component.
	Version string
	// ServiceCIDR is the service range (in the API server's flags and its
	// certificate).
	ServiceCIDR string
	// NodeAddress is the address nodes reach the API server at (in its
	// flags and certificate); empty for loopback only.
	NodeAddress string
}

// Request is a new cluster that may claim a plane.
type Request struct {
	Shape Shape
	// PodCIDR is the pod range the cluster asks for; empty takes the
	// plane's.
	PodCIDR string
	// Provisioned: the cluster already has ports or PKI of its own (it was
	// started before, cold or from another plane), so it claims nothing.
	Provisioned bool
	// Restore: the cluster starts from a snapshot, with the CAs of the
	// cluster it was taken of; a standby plane has neither.
	Restore bool
}

// Pick returns the plane req claims: the oldest ready, unclaimed plane of
// req's shape (and pod range, when req names one). ok is false when req
// must start a control plane of its own.
func Pick(planes []Plane, req Request) (p Plane, ok bool) {
	if req.Provisioned || req.Restore {
		return Plane{}, false
	}
	var best *Plane
	for i := range planes {
		c := &planes[i]
		if !c.Ready || c.ClaimedBy != "" || c.Shape != req.Shape || (req.PodCIDR != "" && req.PodCIDR != c.PodCIDR) {
			continue
		}
		if best == nil || c.Created.Before(best.Created) {
			best = c
		}
	}
	if best == nil {
		return Plane{}, false
	}
	return *best, true
}

// Plan is what the pool does next.
type Plan struct {
	// Start: make one more plane.
	Start bool
	// Remove lists planes to stop and delete: planes of a shape no cluster
	// gets any more (the default version changed), planes beyond the size,
	// and planes claimed by a cluster that no longer exists.
	Remove []string
}

// Decide plans the pool's next step. size is the number of unclaimed
// planes wanted of shape; busy says that a cluster is starting or
// upgrading, when the pool starts nothing so as not to take CPU from it;
// clusters holds the UIDs of the clusters that exist. One plane starts at a
// time: none while another is not ready yet.
func Decide(planes []Plane, shape Shape, size int, busy bool, clusters map[string]bool) Plan {
	var plan Plan
	var idle []Plane
	starting := false
	for _, p := range planes {
		switch {
		case p.ClaimedBy != "":
			if !clusters[p.ClaimedBy] {
				plan.Remove = append(plan.Remove, p.ID)
			}
		case p.Shape != shape:
			plan.Remove = append(plan.Remove, p.ID)
		default:
			idle = append(idle, p)
			starting = starting || !p.Ready
		}
	}
	if len(idle) > size {
		// Keep the oldest (most likely ready); remove the newest.
		slices.SortStableFunc(idle, func(a, b Plane) int { return a.Created.Compare(b.Created) })
		for _, p := range idle[max(size, 0):] {
			plan.Remove = append(plan.Remove, p.ID)
		}
		return plan
	}
	plan.Start = len(idle) < size && !busy && !starting
	return plan
}
