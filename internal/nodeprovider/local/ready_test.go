package local

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criVersion serves the CRI runtime service's Version only.
type criVersion struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (criVersion) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeApiVersion: "v1"}, nil
}

func TestContainerdReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve bool // whether a server listens on the socket
		cri   bool // whether it registers the CRI runtime service
		want  string
	}{
		{name: "CRI served", serve: true, cri: true, want: "ready"},
		{name: "containerd without its CRI plugin", serve: true, want: "no CRI"},
		{name: "no socket yet", want: "not yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NewNode(NodeConfig{Name: "n1", Dir: t.TempDir()}, nil, nil, nil)
			state := n.l.ContainerdState()
			if err := os.MkdirAll(state, 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.serve {
				lis, err := net.Listen("unix", filepath.Join(state, "containerd.sock"))
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer()
				if tc.cri {
					runtimeapi.RegisterRuntimeServiceServer(srv, criVersion{})
				}
				go func() { _ = srv.Serve(lis) }()
				t.Cleanup(srv.Stop)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			err := n.containerdReady(ctx)
			got := "not yet"
			switch {
			case err == nil:
				got = "ready"
			case errors.Is(err, errNoCRI):
				got = "no CRI"
			}
			if got != tc.want {
				t.Fatalf("containerdReady: %v (%s), want %s", err, got, tc.want)
			}
		})
	}
}
