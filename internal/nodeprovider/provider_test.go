package nodeprovider_test

import (
	"testing"

	"fke.dev/fke/internal/nodeprovider"
	"fke.dev/fke/internal/nodeprovider/fake"
	"fke.dev/fke/internal/nodeprovider/providertest"
)

// TestProviderContract runs the shared contract against the fake; the kwok
// provider runs it in its package against a real cluster, the local
// provider in test/localnode.
func TestProviderContract(t *testing.T) {
	providertest.Run(t, func(*testing.T) (nodeprovider.Provider, nodeprovider.Cluster, nodeprovider.Cluster) {
		return fake.New(),
			nodeprovider.Cluster{Key: "default/a", Name: "a", PodCIDR: "10.244.0.0/16"},
			nodeprovider.Cluster{Key: "default/b", Name: "b", PodCIDR: "10.244.0.0/16"}
	}, nil)
}
