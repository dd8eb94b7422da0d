// Package controlplane defines how a tenant cluster's control plane is run.
// Implementations: local/ (supervised processes on this machine) and hosted/
// (Deployments and StatefulSets in a management Kubernetes cluster).
package controlplane

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/pki"
)

// Ports are the loopback ports a control plane listens on.
type Ports struct {
	APIServer, EtcdClient, EtcdPeer, ControllerManager, Scheduler int
}

// Spec is everything a Runtime needs to run one control plane.
type Spec struct {
	// Key identifies the control plane ("namespace/name" of its Cluster).
	Key string
	// ClusterName is the name kube-controller-manager knows the cluster
	// by (--cluster-name); empty means Key's last element. The local
	// runtime keeps the name a plane first started with (a standby
	// plane's id, also once a cluster adopted it), so that its processes'
	// command stays the same for life.
	ClusterName string
	// Version is the Kubernetes version, e.g. v1.37.2: the version Upgrade
	// moves a component to, and the one a component starts at unless
	// ComponentVersions names another.
	Version string
	// ComponentVersions is the version a component starts at when it does
	// not run (by component name; etcd has none): during an upgrade, the
	// components not yet upgraded start again at the version they ran.
	ComponentVersions map[string]string
	// Ports must be free or already used by this control plane.
	Ports Ports
	// PodCIDR and ServiceCIDR are the cluster's address ranges.
	PodCIDR, ServiceCIDR string
	// PKI holds every certificate and key (see pki.EnsureBundle).
	PKI pki.Bundle
	// NodeAddress is the address at which nodes reach the API server (for
	// local nodes, the host bridge's 172.29.0.1, forwarded to loopback).
	// When set, the API server advertises it and its endpoint reconciler
	// keeps the kubernetes Service pointing at NodeAddress:<API server
	// port>; its serving certificate must cover it (APIServerIPs). Empty:
	// the API server is reachable on loopback only and the reconciler is
	// off.
	NodeAddress string
	// Standby marks a plane of a warm pool: started before any cluster
	// asks for it, it runs at low CPU priority until Adopt gives it to a
	// cluster.
	Standby bool
	// Datastore says where the control plane keeps its data: "dedicated"
	// (default: an etcd of its own) or "shared" (a prefix, user and role of
	// its own in a shared etcd; runtimes that have one).
	Datastore string
	// Restore is a snapshot file (checked by the caller; see package
	// backup) that seeds the control plane's data the first time it
	// starts: a cluster made from a backup. Ignored once it has data. The
	// local runtime restores etcd snapshots; the hosted runtime both
	// formats (it imports their keys).
	Restore string
}

// Component names, in start order.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// Components lists the components of a control plane in start order.
var Components = []string{Etcd, APIServer, ControllerManager, Scheduler}

// ComponentStatus is the observed state of one component.
type ComponentStatus struct {
	Name    string
	Running bool
	Ready   bool
	// Adopted: the process runs on from an earlier fke-manager, which
	// started it; this one took it over rather than starting it (local
	// components whose processes a process holder keeps).
	Adopted bool
	// Adopting: Adopted, and its readiness not checked again yet: it
	// served under the earlier fke-manager and never stopped. Not Ready,
	// and not a component found unready either.
	Adopting bool
	Restarts int
	// PID is the process id of a local component (0 when not running).
	PID int
	// Version is the Kubernetes version the component runs (empty for etcd
	// and addons).
	Version string
	// Log says where to read an addon process's log.
	Log string
}

// Status is the observed state of a control plane.
type Status struct {
	// Endpoint is the kube-apiserver URL.
	Endpoint   string
	Components []ComponentStatus
	// Addons are the addon processes (see Runtime.EnsureAddons), by name.
	// They do not count towards Ready.
	Addons []ComponentStatus
	// Queued, when set, says why the control plane has not started yet
	// (a runtime that bounds how many start at once).
	Queued string
	// AddonNetwork is where the runtime runs the control plane's addon
	// processes (see Runtime.EnsureAddons); zero while none runs.
	AddonNetwork AddonNetwork
}

// AddonNetwork is how a runtime connects the addon processes of a control
// plane: beside a local API server they listen on loopback and it calls
// them there; in a management cluster each runs in pods of its own behind
// a Service.
type AddonNetwork struct {
	// APIServer is the URL at which addon processes reach the API server.
	APIServer string
	// BindAddress replaces AddonBindVar in an addon's Args: the address it
	// listens on.
	BindAddress string
	// ServiceDomain, when set, makes <addon name>.<ServiceDomain> the host
	// at which the API server reaches an addon process; empty: BindAddress.
	ServiceDomain string
}

// Host returns the host at which the API server reaches the addon process
// name (an ExternalName Service's name, a webhook URL's host).
func (n AddonNetwork) Host(name string) string {
	if n.ServiceDomain != "" {
		return name + "." + n.ServiceDomain
	}
	return n.BindAddress
}

// AddonStatus returns the status of the addon process name, and whether
// one runs under that name.
func (s Status) AddonStatus(name string) (ComponentStatus, bool) {
	for _, a := range s.Addons {
		if a.Name == name {
			return a, true
		}
	}
	return ComponentStatus{}, false
}

// AddonDirVar is replaced in an Addon's Args by the directory that holds its
// Files, as $(VAR) is in a container's arguments.
const AddonDirVar = "$(ADDON_DIR)"

// AddonBindVar is replaced in an Addon's Args by the address it listens on
// (AddonNetwork.BindAddress).
const AddonBindVar = "$(ADDON_BIND_ADDRESS)"

// Addon is a process that runs beside a control plane for one of the
// cluster's addons: a server the API server calls (an aggregated API server
// or an admission webhook), run as a managed service hosts it rather than
// on the cluster's nodes.
type Addon struct {
	// Name identifies the addon within its control plane, e.g. metrics-server.
	Name string
	// Binary names its executable (found like the upstream binaries).
	Binary string
	// Files are written (mode 0600) into the addon's directory before it
	// starts: base name -> content.
	Files map[string][]byte
	// Args are its arguments; AddonDirVar in them stands for the directory
	// holding Files, AddonBindVar for the address it listens on.
	Args []string
	// Port, when not zero, is the port on which the API server calls it
	// (at AddonNetwork.Host of its Name). A runtime that runs it in pods
	// publishes it there through a Service.
	Port int32
	// HealthURL is polled (GET, 2xx is healthy) to tell that the process
	// serves; empty means it serves once started. A runtime that runs it
	// in pods probes the URL's path and port in the pod instead (with no
	// client certificate: an addon that asks for one is checked to listen).
	HealthURL string
	// HealthCA verifies HealthURL's serving certificate (PEM), and
	// HealthServerName is the name it must hold.
	HealthCA         []byte
	HealthServerName string
	// HealthClientCert and HealthClientKey (PEM), when set, are the client
	// certificate the check presents (for a process that serves nobody
	// without one).
	HealthClientCert, HealthClientKey []byte
}

// ExpandArgs returns a's Args with AddonDirVar replaced by dir, where its
// Files are, and AddonBindVar by bind.
func (a Addon) ExpandArgs(dir, bind string) []string {
	r := strings.NewReplacer(AddonDirVar, dir, AddonBindVar, bind)
	out := make([]string, len(a.Args))
	for i, arg := range a.Args {
		out[i] = r.Replace(arg)
	}
	return out
}

// Ready reports whether every component is ready.
func (s Status) Ready() bool {
	if len(s.Components) != len(Components) {
		return false
	}
	for _, c := range s.Components {
		if !c.Ready {
			return false
		}
	}
	return true
}

// Adopting reports whether the control plane is being taken over from an
// earlier fke-manager: every component is Ready or Adopting, and one is
// Adopting. Its components run on and were never found unready.
func (s Status) Adopting() bool {
	if len(s.Components) != len(Components) {
		return false
	}
	adopting := false
	for _, c := range s.Components {
		if !c.Ready && !c.Adopting {
			return false
		}
		adopting = adopting || c.Adopting
	}
	return adopting
}

// NotReady lists the components that are not ready.
func (s Status) NotReady() []string {
	ready := map[string]bool{}
	for _, c := range s.Components {
		ready[c.Name] = c.Ready
	}
	var out []string
	for _, n := range Components {
		if !ready[n] {
			out = append(out, n)
		}
	}
	return out
}

// Runtime runs control planes.
type Runtime interface {
	// Ensure starts every component of spec.Key that is not running and
	// returns without waiting for readiness; call Status to observe it.
	// Idempotent: running components are left alone. Data written by an
	// earlier Ensure for the same key (etcd data) is reused.
	Ensure(ctx context.Context, spec Spec) (Status, error)
	// Status reports the components of key; the zero Status when none runs.
	// An error means the runtime could not observe them (e.g. the
	// management cluster did not answer), not that they are unhealthy.
	Status(ctx context.Context, key string) (Status, error)
	// Addresses returns the names and addresses at which spec's control
	// plane is reached, which its serving certificates must cover; call it
	// before Ensure (the runtime may reserve them, e.g. a Service). It
	// reads Key, ServiceCIDR and NodeAddress of spec.
	Addresses(ctx context.Context, spec Spec) (Addresses, error)
	// Stop stops the components of key and keeps their data. Idempotent.
	Stop(ctx context.Context, key string) error
	// SetAsideData stops the components of key and moves etcd's data
	// aside (kept, not deleted), so that the next Ensure with Spec.Restore
	// starts from a snapshot: a restore in place. A runtime that is an
	// InPlaceRestorer is restored in place through it instead.
	SetAsideData(ctx context.Context, key string) error
	// Upgrade replaces the running component of spec.Key (kube-apiserver,
	// kube-controller-manager or kube-scheduler) by spec.Version's and
	// returns once the new one is ready. The API server is replaced without
	// a gap where the runtime can run two at once. When the new component
	// does not become ready, the old version runs again (or still runs) and
	// the error says why. A component already at spec.Version is left alone.
	Upgrade(ctx context.Context, spec Spec, component string) error
	// Adopt makes the control plane of key from (a standby plane, see
	// Spec.Standby) the control plane of key to, with its data; processes
	// that run keep running, at normal priority, and Status, Stop, Upgrade
	// and Delete of to reach them. The caller then calls Ensure with to's
	// spec, which must equal from's but for Key and Standby. Idempotent:
	// nothing to do when to already holds it; an error when to holds
	// another control plane.
	Adopt(ctx context.Context, from, to string) error
	// Snapshot takes a snapshot of the data of spec.Key's running control
	// plane into d, named after now, for the cluster with uid (see package
	// backup). It reads Key, PKI, Ports and Datastore of spec. The local
	// runtime takes an etcd snapshot (backup.FormatEtcd); the hosted one
	// exports the tenant's keys (backup.FormatKeys), from its own etcd or
	// its prefix of the shared one, through the management cluster.
	Snapshot(ctx context.Context, spec Spec, d backup.Dir, now time.Time, uid string) (backup.Snapshot, error)
	// Delete stops the components of key and removes their data. Idempotent.
	Delete(ctx context.Context, key string) error
	// EnsureAddons makes the addon processes of key be exactly addons: it
	// starts those that do not run, restarts those whose Binary, Files or
	// Args changed, and stops and removes the others; it returns without
	// waiting for them to serve (Status reports them). Call it after Ensure
	// for the same key; Stop and Delete stop the addons with the control
	// plane, and a later Ensure does not start them again. Idempotent.
	EnsureAddons(ctx context.Context, key string, addons []Addon) (Status, error)
}

// Addresses are where a control plane is reached: its API server's
// serving certificate covers APIServerDNSNames and APIServerIPs (beyond
// the kubernetes Service's names), etcd's covers EtcdDNSNames.
type Addresses struct {
	APIServerDNSNames []string
	APIServerIPs      []net.IP
	EtcdDNSNames      []string
}

// APIServerIPs returns the addresses the API server's certificate must cover
// for a service CIDR: loopback, the first service IP (the kubernetes
// Service) and, when not empty, the node address (see Spec.NodeAddress).
func APIServerIPs(serviceCIDR, nodeAddress string) ([]net.IP, error) {
	_, ipnet, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return nil, err
	}
	first := make(net.IP, len(ipnet.IP.To4()))
	copy(first, ipnet.IP.To4())
	first[len(first)-1]++
	ips := []net.IP{net.IPv4(127, 0, 0, 1), first}
	if nodeAddress != "" {
		ip := net.ParseIP(nodeAddress)
		if ip == nil || ip.To4() == nil {
			return nil, fmt.Errorf("node address %q is not an IPv4 address", nodeAddress)
		}
		ips = append(ips, ip.To4())
	}
	return ips, nil
}

// StartPoller is a Runtime whose control planes take long enough to start
// that its callers ask for their Status less often than they would a
// process on this machine: StartPollInterval is how often.
type StartPoller interface {
	StartPollInterval() time.Duration
}

// InPlaceRestorer is a Runtime whose datastore keeps running while a
// snapshot's keys replace its data (a hosted one, whose etcd is a set of
// pods or a prefix of a shared cluster, not a directory to set aside).
type InPlaceRestorer interface {
	// RestoreInPlace stops the components of spec.Key (Key, PKI and
	// Datastore are read), waits until none runs, and replaces the data
	// of its datastore by the keys of snapshot (a file of either
	// format). The next Ensure, without Spec.Restore, starts the
	// components again. The data replaced is not kept: the caller takes
	// a snapshot first.
	RestoreInPlace(ctx context.Context, spec Spec, snapshot string) error
}
