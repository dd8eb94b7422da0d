package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"

	gpuconfig "fke.dev/fke/internal/gpu/config"
	"fke.dev/fke/internal/gpu/driver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// HealthSource says whether a physical GPU is usable and when that may have changed.
type HealthSource interface {
	// Healthy reports whether the GPU with uuid is usable; unknown UUIDs are healthy.
	Healthy(uuid string) bool
	// Subscribe returns a channel that receives (coalesced) after any health
	// change, and a function that ends the subscription.
	Subscribe() (<-chan struct{}, func())
}

// AlwaysHealthy is the HealthSource used when health monitoring is disabled.
type AlwaysHealthy struct{}

var _ HealthSource = AlwaysHealthy{}

func (AlwaysHealthy) Healthy(string) bool { return true }
func (AlwaysHealthy) Subscribe() (<-chan struct{}, func()) {
	return make(chan struct{}), func() {}
}

// Plugin serves the device plugin API for one resource on one unix socket.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	res      Resource
	byID     map[string]Device
	topo     Topology
	policy   gpuconfig.AllocationPolicy
	strategy gpuconfig.DeviceListStrategy
	driver   *driver.Driver
	health   HealthSource
	socket   string
	log      *slog.Logger

	mu     sync.Mutex
	server *grpc.Server
	info   os.FileInfo // the socket file we created
	stop   chan struct{}
}

var _ pluginapi.DevicePluginServer = (*Plugin)(nil)

// NewPlugin serves res on socket (a path in the kubelet's plugin dir) with
// o's Policy, Strategy, Driver, Health and Log (the other fields are the
// Manager's).
func NewPlugin(res Resource, topo Topology, socket string, o ManagerOptions) *Plugin {
	byID := make(map[string]Device, len(res.Devices))
	for _, d := range res.Devices {
		byID[d.ID] = d
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Health == nil {
		o.Health = AlwaysHealthy{}
	}
	return &Plugin{res: res, byID: byID, topo: topo, policy: o.Policy, strategy: o.Strategy, driver: o.Driver, health: o.Health, socket: socket,
		log: o.Log.With("resource", res.Name)}
}

// Resource returns the advertised resource.
func (p *Plugin) Resource() Resource { return p.res }

// Socket returns the plugin's socket path.
func (p *Plugin) Socket() string { return p.socket }

// Start listens on the socket (replacing a stale file) and serves. Calling
// Start on a started plugin restarts it.
func (p *Plugin) Start() error {
	p.Stop()
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", p.socket, err)
	}
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", p.socket, err)
	}
	// We remove the file ourselves: a closing listener must never unlink a
	// socket that a restarted plugin has created at the same path.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	info, err := os.Stat(p.socket)
	if err != nil {
		l.Close()
		return fmt.Errorf("checking socket %s: %w", p.socket, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	p.mu.Lock()
	p.server, p.info, p.stop = srv, info, make(chan struct{})
	p.mu.Unlock()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			p.log.Error("device plugin server stopped", "err", err)
		}
	}()
	p.log.Info("device plugin serving", "socket", p.socket, "devices", len(p.res.Devices))
	return nil
}

// Stop ends every stream and stops serving; it removes the socket file if
// it is still the one Start created. Stop is idempotent.
func (p *Plugin) Stop() {
	p.mu.Lock()
	srv, info, stop := p.server, p.info, p.stop
	p.server, p.info, p.stop = nil, nil, nil
	p.mu.Unlock()
	if srv == nil {
		return
	}
	close(stop)
	srv.Stop()
	if cur, err := os.Stat(p.socket); err == nil && os.SameFile(cur, info) {
		if err := os.Remove(p.socket); err != nil {
			p.log.Warn("removing socket", "socket", p.socket, "err", err)
		}
	}
}

// SocketIntact reports whether the socket file Start created is still in place.
func (p *Plugin) SocketIntact() bool {
	p.mu.Lock()
	info := p.info
	p.mu.Unlock()
	if info == nil {
		return false
	}
	cur, err := os.Stat(p.socket)
	return err == nil && os.SameFile(cur, info)
}

// Devices returns the device list as ListAndWatch sends it now.
func (p *Plugin) Devices() []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(p.res.Devices))
	for _, d := range p.res.Devices {
		h := pluginapi.Healthy
		if !p.health.Healthy(d.GPU) {
			h = pluginapi.Unhealthy
		}
		pd := &pluginapi.Device{ID: d.ID, Health: h}
		if d.NUMANode >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
		}
		out = append(out, pd)
	}
	return out
}

// HealthyCount is the number of devices the kubelet should count as allocatable.
func (p *Plugin) HealthyCount() int {
	n := 0
	for _, d := range p.Devices() {
		if d.Health == pluginapi.Healthy {
			n++
		}
	}
	return n
}

func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list, then again after every health change
// that alters it, until the stream or the plugin ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	p.mu.Lock()
	stop := p.stop
	p.mu.Unlock()
	changes, cancel := p.health.Subscribe()
	defer cancel()
	last := p.Devices()
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: last}); err != nil {
		return fmt.Errorf("sending device list: %w", err)
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-stop:
			return nil
		case <-changes:
		}
		cur := p.Devices()
		if slices.EqualFunc(cur, last, func(a, b *pluginapi.Device) bool { return a.ID == b.ID && a.Health == b.Health }) {
			continue
		}
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: cur}); err != nil {
			return fmt.Errorf("sending device list: %w", err)
		}
		p.log.Info("device list sent", "healthy", countHealthy(cur), "total", len(cur))
		last = cur
	}
}

func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids, err := Preferred(p.policy, p.byID, p.topo, Request{Available: c.AvailableDeviceIDs, MustInclude: c.MustIncludeDeviceIDs, Size: int(c.AllocationSize)})
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr, err := ContainerResponse(p.res, p.byID, c.DevicesIds, p.strategy, p.driver)
		if err != nil {
			p.log.Warn("allocate rejected", "devices", c.DevicesIds, "err", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func countHealthy(ds []*pluginapi.Device) int {
	n := 0
	for _, d := range ds {
		if d.Health == pluginapi.Healthy {
			n++
		}
	}
	return n
}
