package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fke.dev/fke/internal/nodeutil"
)

// ReadyNodes returns the names of the Ready nodes of the cluster cs reaches.
func ReadyNodes(t testing.TB, cs kubernetes.Interface) []string {
	t.Helper()
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range list.Items {
		if nodeutil.NodeReady(&list.Items[i]) {
			out = append(out, list.Items[i].Name)
		}
	}
	return out
}

// WaitReadyNodes waits until exactly n nodes are Ready and returns their names.
func WaitReadyNodes(t testing.TB, cs kubernetes.Interface, n int) []string {
	t.Helper()
	var names []string
	Eventually(t, 2*time.Minute, fmt.Sprintf("%d Ready nodes", n), func() error {
		names = ReadyNodes(t, cs)
		if len(names) != n {
			return fmt.Errorf("%d Ready", len(names))
		}
		return nil
	})
	return names
}
