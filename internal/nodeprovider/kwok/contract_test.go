package kwok_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/internal/nodeprovider/providertest"
	"fke.dev/fke/test/testenv"
)

// TestProviderContract runs the shared provider contract against kwok and
// one real tenant cluster; cluster b is a second name in the same tenant.
func TestProviderContract(t *testing.T) {
	tn := upTenant(t)
	// One provider for every case: each case starting and stopping kwok
	// processes against the same tenant made kwok fail to start again.
	p := kwok.New(kwok.Options{
		DataDir:  t.TempDir(),
		Binaries: binaries.Finder{Dir: testenv.BinDir(t)},
		Logger:   slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.StopAll(ctx); err != nil {
			t.Error(err)
		}
	})
	providertest.Run(t, func(t *testing.T) (nodeprovider.Provider, nodeprovider.Cluster, nodeprovider.Cluster) {
		a := tn.cluster
		b := a
		b.Key, b.Name = "default/other", "other"
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// The next case starts from a cluster without nodes.
			if err := tn.client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Error(err)
			}
		})
		return p, a, b
	}, nil)
}
