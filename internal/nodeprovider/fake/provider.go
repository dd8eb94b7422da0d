// Package fake is an in-memory nodeprovider.Provider for unit tests: it
// keeps instances in maps, records every call, and fails calls on demand
// (a generic error per method, once or until cleared, or insufficient
// capacity per instance type). It makes no Nodes and never waits.
package fake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/nodeprovider"
)

// Method names, as recorded in Call.Method and accepted by SetError and FailNext.
const (
	MethodCreate        = "Create"
	MethodDelete        = "Delete"
	MethodGet           = "Get"
	MethodList          = "List"
	MethodInstanceTypes = "InstanceTypes"
	MethodRelease       = "Release"
)

// ProviderIDPrefix starts every provider ID: fake://<cluster>/<node>.
const ProviderIDPrefix = "fake://"

// Call is one recorded call.
type Call struct {
	// Method is one of the Method constants.
	Method string
	// ClusterKey is the cluster's key (empty for InstanceTypes).
	ClusterKey string
	// MachineName is set for Create.
	MachineName string
	// InstanceType is set for Create when the spec has one.
	InstanceType string
	// ProviderID is set for Delete and Get.
	ProviderID string
	// Err is what the call returned.
	Err error
}

// Provider is an in-memory nodeprovider.Provider. The zero value is not
// usable; call New. Its methods are safe for concurrent use.
type Provider struct {
	name fkev1.ProviderName

	mu          sync.Mutex
	instances   map[string]map[string]nodeprovider.Instance // cluster key → provider ID → instance
	calls       []Call
	errs        map[string]error   // sticky error per method
	next        map[string][]error // one-shot errors per method, first first
	noCapacity  map[string]string  // instance type → reason
	unsupported map[string]bool    // instance types InstanceTypes leaves out
	released    map[string]int     // cluster key → Release calls that succeeded
}

var _ nodeprovider.Provider = (*Provider)(nil)

// New returns an empty Provider named kwok, so that it stands in for the
// default provider of node pools.
func New() *Provider { return NewNamed(fkev1.ProviderKwok) }

// NewNamed returns an empty Provider that reports name.
func NewNamed(name fkev1.ProviderName) *Provider {
	return &Provider{
		name:        name,
		instances:   map[string]map[string]nodeprovider.Instance{},
		errs:        map[string]error{},
		next:        map[string][]error{},
		noCapacity:  map[string]string{},
		unsupported: map[string]bool{},
		released:    map[string]int{},
	}
}

// ProviderID returns the provider ID the fake gives node nodeName of cluster clusterName.
func ProviderID(clusterName, nodeName string) string {
	return ProviderIDPrefix + clusterName + "/" + nodeName
}

// SetError makes every later call of method fail with err until it is
// cleared with a nil err. One-shot errors (FailNext) come first.
func (p *Provider) SetError(method string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.errs, method)
		return
	}
	p.errs[method] = err
}

// FailNext makes the next call of method fail with err; several calls queue.
func (p *Provider) FailNext(method string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next[method] = append(p.next[method], err)
}

// SetInsufficientCapacity makes Create fail with an
// *nodeprovider.InsufficientCapacityError for instanceType, with reason,
// until ClearInsufficientCapacity.
func (p *Provider) SetInsufficientCapacity(instanceType, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noCapacity[instanceType] = reason
}

// ClearInsufficientCapacity lets Create make instanceType again.
func (p *Provider) ClearInsufficientCapacity(instanceType string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.noCapacity, instanceType)
}

// SetUnsupported makes InstanceTypes leave out the named types.
func (p *Provider) SetUnsupported(instanceTypes ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range instanceTypes {
		p.unsupported[n] = true
	}
}

// Calls returns the recorded calls, oldest first.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// CallsTo returns the recorded calls of method, oldest first.
func (p *Provider) CallsTo(method string) []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Call
	for _, c := range p.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// ResetCalls forgets the recorded calls.
func (p *Provider) ResetCalls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
}

// Instances returns the instances of the cluster with key clusterKey,
// ordered by provider ID.
func (p *Provider) Instances(clusterKey string) []nodeprovider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sortedLocked(clusterKey)
}

// AddInstance puts an instance into the cluster with key clusterKey, as if
// made earlier (e.g. before a manager restart). It records no call.
func (p *Provider) AddInstance(clusterKey string, in nodeprovider.Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clusterLocked(clusterKey)[in.ProviderID] = in
}

// Released reports how many times Release succeeded for the cluster with key clusterKey.
func (p *Provider) Released(clusterKey string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released[clusterKey]
}

// Name returns the name given to NewNamed (kwok for New).
func (p *Provider) Name() fkev1.ProviderName { return p.name }

// Create makes an instance for spec, named after spec.Template (or the
// machine when there is no template). Idempotent per MachineName.
func (p *Provider) Create(_ context.Context, cluster nodeprovider.Cluster, spec nodeprovider.NodeSpec) (nodeprovider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call := Call{Method: MethodCreate, ClusterKey: cluster.Key, MachineName: spec.MachineName}
	if spec.InstanceType != nil {
		call.InstanceType = spec.InstanceType.Name
	}
	in, err := p.createLocked(cluster, spec, call.InstanceType)
	call.Err = err
	p.calls = append(p.calls, call)
	return in, err
}

func (p *Provider) createLocked(cluster nodeprovider.Cluster, spec nodeprovider.NodeSpec, instanceType string) (nodeprovider.Instance, error) {
	if err := p.injectedLocked(MethodCreate); err != nil {
		return nodeprovider.Instance{}, err
	}
	if spec.MachineName == "" {
		return nodeprovider.Instance{}, errors.New("creating fake instance: empty machine name")
	}
	for _, in := range p.instances[cluster.Key] {
		if in.MachineName == spec.MachineName {
			return in, nil
		}
	}
	if reason, ok := p.noCapacity[instanceType]; ok {
		return nodeprovider.Instance{}, fmt.Errorf("creating fake instance for machine %s: %w",
			spec.MachineName, &nodeprovider.InsufficientCapacityError{InstanceType: instanceType, Reason: reason})
	}
	nodeName := spec.MachineName
	if spec.Template != nil && spec.Template.Name != "" {
		nodeName = spec.Template.Name
	}
	in := nodeprovider.Instance{
		ProviderID:  ProviderID(cluster.Name, nodeName),
		NodeName:    nodeName,
		MachineName: spec.MachineName,
		State:       nodeprovider.InstanceRunning,
	}
	instances := p.clusterLocked(cluster.Key)
	if other, ok := instances[in.ProviderID]; ok {
		return nodeprovider.Instance{}, fmt.Errorf("creating fake instance for machine %s: node %s belongs to machine %s",
			spec.MachineName, nodeName, other.MachineName)
	}
	instances[in.ProviderID] = in
	return in, nil
}

// Delete removes the instance, or returns a *nodeprovider.NotFoundError.
func (p *Provider) Delete(_ context.Context, cluster nodeprovider.Cluster, providerID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.injectedLocked(MethodDelete)
	if err == nil {
		if _, ok := p.instances[cluster.Key][providerID]; ok {
			delete(p.instances[cluster.Key], providerID)
		} else {
			err = &nodeprovider.NotFoundError{ProviderID: providerID}
		}
	}
	p.calls = append(p.calls, Call{Method: MethodDelete, ClusterKey: cluster.Key, ProviderID: providerID, Err: err})
	return err
}

// Get returns the instance, or a *nodeprovider.NotFoundError.
func (p *Provider) Get(_ context.Context, cluster nodeprovider.Cluster, providerID string) (nodeprovider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var in nodeprovider.Instance
	err := p.injectedLocked(MethodGet)
	if err == nil {
		var ok bool
		if in, ok = p.instances[cluster.Key][providerID]; !ok {
			err = &nodeprovider.NotFoundError{ProviderID: providerID}
		}
	}
	p.calls = append(p.calls, Call{Method: MethodGet, ClusterKey: cluster.Key, ProviderID: providerID, Err: err})
	return in, err
}

// List returns the cluster's instances ordered by provider ID.
func (p *Provider) List(_ context.Context, cluster nodeprovider.Cluster) ([]nodeprovider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []nodeprovider.Instance
	err := p.injectedLocked(MethodList)
	if err == nil {
		out = p.sortedLocked(cluster.Key)
	}
	p.calls = append(p.calls, Call{Method: MethodList, ClusterKey: cluster.Key, Err: err})
	return out, err
}

// InstanceTypes returns the catalog less the types named to SetUnsupported.
func (p *Provider) InstanceTypes(_ context.Context, catalog []fkev1.InstanceType) ([]fkev1.InstanceType, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []fkev1.InstanceType
	err := p.injectedLocked(MethodInstanceTypes)
	if err == nil {
		out = make([]fkev1.InstanceType, 0, len(catalog))
		for i := range catalog {
			if !p.unsupported[catalog[i].Name] {
				out = append(out, *catalog[i].DeepCopy())
			}
		}
	}
	p.calls = append(p.calls, Call{Method: MethodInstanceTypes, Err: err})
	return out, err
}

// Release counts the release of the cluster; its instances stay.
func (p *Provider) Release(_ context.Context, cluster nodeprovider.Cluster) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.injectedLocked(MethodRelease)
	if err == nil {
		p.released[cluster.Key]++
	}
	p.calls = append(p.calls, Call{Method: MethodRelease, ClusterKey: cluster.Key, Err: err})
	return err
}

// injectedLocked returns the error injected for method, if any, consuming
// a one-shot error first.
func (p *Provider) injectedLocked(method string) error {
	if q := p.next[method]; len(q) > 0 {
		p.next[method] = q[1:]
		return q[0]
	}
	return p.errs[method]
}

func (p *Provider) clusterLocked(key string) map[string]nodeprovider.Instance {
	m, ok := p.instances[key]
	if !ok {
		m = map[string]nodeprovider.Instance{}
		p.instances[key] = m
	}
	return m
}

func (p *Provider) sortedLocked(clusterKey string) []nodeprovider.Instance {
	out := make([]nodeprovider.Instance, 0, len(p.instances[clusterKey]))
	for _, in := range p.instances[clusterKey] {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b nodeprovider.Instance) int { return strings.Compare(a.ProviderID, b.ProviderID) })
	return out
}
