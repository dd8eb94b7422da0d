package backup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"fke.dev/fke/internal/pki"
)

// TakeCluster snapshots the etcd of the tenant control plane of the cluster
// with uid, listening on loopback port etcdPort, into d, authenticating
// with the cluster's PKI.
func TakeCluster(ctx context.Context, b pki.Bundle, etcdPort int, d Dir, now time.Time, uid string) (Snapshot, error) {
	tlsCfg, err := etcdClientTLS(b)
	if err != nil {
		return Snapshot{}, err
	}
	endpoint := "https://127.0.0.1:" + strconv.Itoa(etcdPort)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		return Snapshot{}, fmt.Errorf("connecting to etcd: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return Take(ctx, c, endpoint, d, now, uid)
}

// etcdClientTLS trusts the cluster's etcd CA and presents the API server's
// etcd client certificate (the one identity etcd accepts).
func etcdClientTLS(b pki.Bundle) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b[pki.EtcdCACertFile]) {
		return nil, fmt.Errorf("the cluster's PKI has no etcd CA")
	}
	pair, err := b.KeyPair(pki.APIServerEtcdClient)
	if err != nil {
		return nil, fmt.Errorf("the cluster's etcd client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair.TLSCertificate()}, MinVersion: tls.VersionTLS12}, nil
}
