package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"fke.dev/fke/internal/bootstrap"
)

// proxyCertPoll is how often a starting node looks for its kubelet's
// kubeconfig and its kube-proxy's first certificate.
const proxyCertPoll = 200 * time.Millisecond

// ProxyCertDir holds kube-proxy's client certificates when the node asks
// for them itself (see bootstrap.ProxyCertificate).
func (l Layout) ProxyCertDir() string { return l.path("kube-proxy-pki") }

// proxyKubeconfig is kube-proxy's kubeconfig: the one the node was given,
// else one reading the certificate the node keeps in ProxyCertDir.
func (n *Node) proxyKubeconfig() ([]byte, error) {
	c := n.cfg
	if len(c.ProxyKubeconfig) > 0 {
		return c.ProxyKubeconfig, nil
	}
	return bootstrap.ProxyCertKubeconfig(c.Server, c.TLSServerName, c.CAPEM, n.l.ProxyCertDir())
}

// ensureProxyCertificate, for a node given no kube-proxy kubeconfig, waits
// until its kubelet joined (wrote its kubeconfig after TLS bootstrap),
// starts keeping kube-proxy's certificate with the kubelet's credential
// until ctx ends, and waits for the first one (fke's approver approves it
// once the Node registered). A node given a kubeconfig has nothing to do.
func (n *Node) ensureProxyCertificate(ctx context.Context) error {
	if len(n.cfg.ProxyKubeconfig) > 0 {
		return nil
	}
	n.setState("Pending", "waiting for the kubelet's TLS bootstrap")
	tick := time.NewTicker(proxyCertPoll)
	defer tick.Stop()
	for {
		_, err := os.Stat(n.l.KubeletKubeconfig())
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	n.setState("Pending", "waiting for kube-proxy's client certificate (a CSR fke approves)")
	pc, err := bootstrap.StartProxyCertificate(ctx, n.cfg.Name, n.l.KubeletKubeconfig(), n.l.ProxyCertDir(), bootstrap.MaxProxyCertLifetime, n.log)
	if err != nil {
		return err
	}
	if err := pc.Wait(ctx, proxyCertPoll); err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	if cert := pc.Current(); cert != nil && cert.Leaf != nil {
		n.log.Info("kube-proxy certificate ready", "user", cert.Leaf.Subject.CommonName, "expires", cert.Leaf.NotAfter)
	}
	return nil
}
