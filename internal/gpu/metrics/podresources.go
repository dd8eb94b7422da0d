// Package metrics exports GPU metrics in Prometheus format under the DCGM
// exporter's names (DCGM_FI_DEV_GPU_UTIL, ...) with the pod, namespace and
// container that hold each GPU, read from the kubelet's pod-resources API
// through one long-lived, caching client.
package metrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"
)

// Owner is a container that holds a device.
type Owner struct {
	Pod       string
	Namespace string
	Container string
}

// OwnerSource maps device IDs to the containers holding them.
type OwnerSource interface {
	// Owners returns, by device UUID (GPU or MIG; replica suffixes removed),
	// the containers holding it.
	Owners(ctx context.Context) (map[string][]Owner, error)
}

// PodResources is a cached pod-resources client: one gRPC connection for
// its lifetime, and List answers reused for TTL. Safe for concurrent use;
// concurrent callers after expiry share one List call.
type PodResources struct {
	conn   *grpc.ClientConn
	client podresourcesapi.PodResourcesListerClient
	ttl    time.Duration
	clock  clock.PassiveClock
	prefix string

	mu     sync.Mutex
	cached map[string][]Owner
	at     time.Time
	valid  bool
	calls  int
}

var _ OwnerSource = (*PodResources)(nil)

// NewPodResources connects (lazily) to the kubelet's pod-resources socket.
// Only devices of resources starting with "nvidia.com/" are kept.
func NewPodResources(socket string, ttl time.Duration, clk clock.PassiveClock) (*PodResources, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to pod-resources at %s: %w", socket, err)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &PodResources{conn: conn, client: podresourcesapi.NewPodResourcesListerClient(conn), ttl: ttl, clock: clk, prefix: "nvidia.com/"}, nil
}

// Owners returns the cached map when younger than the TTL, else lists anew.
// On a failed List the error is returned with no map.
func (p *PodResources) Owners(ctx context.Context) (map[string][]Owner, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if p.valid && now.Sub(p.at) < p.ttl {
		return p.cached, nil
	}
	p.calls++
	resp, err := p.client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		p.valid = false
		return nil, fmt.Errorf("listing pod resources: %w", err)
	}
	out := map[string][]Owner{}
	for _, pr := range resp.GetPodResources() {
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if !strings.HasPrefix(d.GetResourceName(), p.prefix) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					uuid, _, _ := strings.Cut(id, "::")
					out[uuid] = appendOwner(out[uuid], Owner{Pod: pr.GetName(), Namespace: pr.GetNamespace(), Container: c.GetName()})
				}
			}
		}
	}
	p.cached, p.at, p.valid = out, now, true
	return out, nil
}

// Calls returns how many List calls were made (for tests and benchmarks).
func (p *PodResources) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Close closes the connection.
func (p *PodResources) Close() error { return p.conn.Close() }

func appendOwner(list []Owner, o Owner) []Owner {
	for _, x := range list {
		if x == o {
			return list
		}
	}
	return append(list, o)
}
