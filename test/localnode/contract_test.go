package localnode

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/internal/nodeprovider"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
	"fke.dev/fke/internal/nodeprovider/providertest"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/test/testenv"
)

// TestProviderContract runs the shared provider contract against the local
// provider with a real cluster; cluster b is a second name (with a pod
// range of its own) whose nodes join the same API server.
func TestProviderContract(t *testing.T) {
	requireNodeTools(t)
	images := buildImages(t)
	e := testenv.Up(t)
	e.MustRun("cluster", "create", "demo", "--wait")
	a := providerCluster(t, e, "demo")
	b := a
	b.Key, b.Name, b.PodCIDR = "default/other", "other", "10.201.0.0/16"
	cpuSmall := &fkev1.InstanceType{}
	if err := e.Client().Get(t.Context(), client.ObjectKey{Name: "cpu-small"}, cpuSmall); err != nil {
		t.Fatal(err)
	}
	providertest.Run(t, func(t *testing.T) (nodeprovider.Provider, nodeprovider.Cluster, nodeprovider.Cluster) {
		p, err := localnodes.New(localnodes.Options{
			DataDir: t.TempDir(), Binaries: binaries.Finder{Dir: e.BinDir},
			Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			PauseImage: pauseImage, Images: images,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := p.RemoveAll(ctx); err != nil {
				t.Errorf("removing the nodes: %v", err)
			}
		})
		return p, a, b
	}, cpuSmall)
}

// providerCluster describes cluster name as the machine controller does:
// with a join through the host bridge and node certificates from its CA.
func providerCluster(t *testing.T, e *testenv.Env, name string) nodeprovider.Cluster {
	t.Helper()
	c := e.Client()
	cl := &fkev1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, cl); err != nil {
		t.Fatal(err)
	}
	cfg := e.TenantConfig(name)
	server, err := nodejoin.NodeServer(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	creds := &nodejoin.CertCredentials{
		ClusterName: name, Server: server, TLSServerName: nodejoin.ServerName,
		CA: func(ctx context.Context) (*pki.KeyPair, error) {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: fkev1.PKISecretName(name)}, s); err != nil {
				return nil, err
			}
			return pki.Bundle(s.Data).KeyPair(pki.CA)
		},
	}
	join, err := nodejoin.Join(cfg.Host, cfg.CAData, cl.Spec.Network.ServiceCIDR, creds)
	if err != nil {
		t.Fatal(err)
	}
	return nodeprovider.Cluster{
		Key: "default/" + name, Name: name, Config: cfg,
		PodCIDR: cl.Spec.Network.PodCIDR, ServiceCIDR: cl.Spec.Network.ServiceCIDR, Join: join,
	}
}
