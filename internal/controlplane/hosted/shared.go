package hosted

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
)

// The shared etcd cluster lives in Options.SystemNamespace.
const (
	// SharedEtcdName is its StatefulSet and headless Service.
	SharedEtcdName = "fke-etcd"
	// SharedEtcdSecret holds its CA, serving and peer pairs, and the root
	// user's client pair.
	SharedEtcdSecret = "fke-etcd-pki"
	// AnnotationDatastoreUser, on a tenant's namespace, names its etcd
	// user once the user, its role and its prefix are in place.
	AnnotationDatastoreUser = "fke.dev/datastore-user"

	rootUser = "root"
	rootCert = "root.crt"
	rootKey  = "root.key"
)

// sharedEtcd keeps the shared etcd cluster and its tenants: with etcd's
// authentication on and client certificates required, the certificate's
// common name is the etcd user, and each tenant's user holds one role
// that reads and writes its own prefix only.
type sharedEtcd struct {
	r  *Runtime
	mu sync.Mutex // one change of users, roles or members at a time
}

// errStarting: an etcd cluster (the shared one, or a tenant's own) has no
// quorum of ready members yet.
var errStarting = errors.New("the etcd cluster is starting")

// tenantCreds are what a tenant's API server needs of the shared etcd.
type tenantCreds struct {
	ca, cert, key []byte
	servers       []string
	prefix        string
}

// Prefix is the key prefix of the tenant whose namespace is ns (the API
// server's --etcd-prefix); its role covers Prefix(ns)+"/".
func Prefix(ns string) string { return "/fke/" + ns }

func (s *sharedEtcd) ns() string { return s.r.opts.SystemNamespace }

// ensure applies the shared etcd cluster (namespace, PKI, StatefulSet)
// and returns its PKI Secret's data.
func (s *sharedEtcd) ensure(ctx context.Context) (map[string][]byte, error) {
	c := s.r.c
	ns := s.ns()
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("getting namespace %s: %w", ns, err)
	}
	secret := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: SharedEtcdSecret}, secret)
	if apierrors.IsNotFound(err) {
		data, err := sharedPKI(ns)
		if err != nil {
			return nil, err
		}
		secret = &corev1.Secret{ObjectMeta: meta(SharedEtcdSecret, ns, nil), Type: corev1.SecretTypeOpaque, Data: data}
		if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", ns, SharedEtcdSecret, err)
		}
		err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: SharedEtcdSecret}, secret)
	}
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s/%s: %w", ns, SharedEtcdSecret, err)
	}
	sts, svc, budget := etcdCluster(SharedEtcdName, ns, SharedEtcdSecret, s.r.image(controlplane.Etcd, ""), s.r.opts.EtcdReplicas,
		// Tenants' API servers do not compact (their roles cannot write
		// the compaction key outside their prefix); etcd compacts itself.
		[]string{"--auto-compaction-mode=periodic", "--auto-compaction-retention=5m"}, hashData(secret.Data))
	if err := s.r.apply(ctx, svc, budget, sts); err != nil {
		return nil, err
	}
	return secret.Data, nil
}

// replaceMembers replaces the shared etcd's members whose pods started
// without their data, as root; one tenant's reconcile at a time.
func (s *sharedEtcd) replaceMembers(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pods corev1.PodList
	if err := s.r.c.List(ctx, &pods, client.InNamespace(s.ns()), client.MatchingLabels{LabelComponent: SharedEtcdName}); err != nil {
		return fmt.Errorf("listing the pods of etcd %s/%s: %w", s.ns(), SharedEtcdName, err)
	}
	return s.r.replaceMembers(ctx, s.ns(), SharedEtcdName, pods.Items, func(ctx context.Context) (*clientv3.Client, error) {
		secret := &corev1.Secret{}
		if err := s.r.c.Get(ctx, client.ObjectKey{Namespace: s.ns(), Name: SharedEtcdSecret}, secret); err != nil {
			return nil, fmt.Errorf("getting Secret %s/%s: %w", s.ns(), SharedEtcdSecret, err)
		}
		return s.client(ctx, secret.Data, secret.Data[rootCert], secret.Data[rootKey])
	})
}

// sharedPKI makes the shared etcd's CA, its serving and peer pairs for
// its members' names, and the root user's client pair.
func sharedPKI(ns string) (map[string][]byte, error) {
	ca, err := pki.NewCA("fke-shared-etcd-ca", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	names := append([]string{"localhost"}, etcdNames(SharedEtcdName, ns)...)
	data := map[string][]byte{pki.EtcdCACertFile: ca.CertPEM(), pki.EtcdCAKeyFile: ca.KeyPEM()}
	for _, l := range []struct {
		base string
		spec pki.CertSpec
	}{
		{pki.EtcdServer, pki.CertSpec{CommonName: "etcd-server", DNSNames: names, Usages: pki.UsageBoth}},
		{pki.EtcdPeer, pki.CertSpec{CommonName: pki.EtcdPeerCommonName, DNSNames: names, Usages: pki.UsageBoth}},
		{"root", pki.CertSpec{CommonName: rootUser, Usages: pki.UsageClient}},
	} {
		kp, err := ca.Issue(l.spec)
		if err != nil {
			return nil, fmt.Errorf("issuing %s: %w", l.base, err)
		}
		data[pki.CertFile(l.base)], data[pki.KeyFile(l.base)] = kp.CertPEM(), kp.KeyPEM()
	}
	return data, nil
}

// client connects to the shared etcd's ready members as user (a pair
// issued by its CA).
func (s *sharedEtcd) client(ctx context.Context, data map[string][]byte, certPEM, keyPEM []byte) (*clientv3.Client, error) {
	return s.r.etcdClient(ctx, s.ns(), SharedEtcdName, data[pki.EtcdCACertFile], certPEM, keyPEM)
}

// etcdClient connects to the ready members of the etcd StatefulSet name
// in namespace ns with a client pair, at their pod addresses: fke-manager
// may run outside the management cluster, where Service names do not
// resolve. errStarting: fewer members than a quorum are ready.
func (r *Runtime) etcdClient(ctx context.Context, ns, name string, caPEM, certPEM, keyPEM []byte) (*clientv3.Client, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelComponent: name}); err != nil {
		return nil, fmt.Errorf("listing the pods of etcd %s/%s: %w", ns, name, err)
	}
	var endpoints []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && podReady(&p) {
			endpoints = append(endpoints, "https://"+p.Status.PodIP+":2379")
		}
	}
	if len(endpoints) < int(r.opts.EtcdReplicas)/2+1 {
		return nil, errStarting
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("etcd %s/%s client pair: %w", ns, name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA of etcd %s/%s", ns, name)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         TLSByName(pool, pair, name+"."+ns+".svc"),
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
}

// TLSByName is a client TLS configuration that presents pair and accepts a
// server whose certificate chains to roots and holds name, whatever
// address it was dialled at: etcd's client names each connection after
// its endpoint's host, here a pod address no certificate can know.
func TLSByName(roots *x509.CertPool, pair tls.Certificate, name string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		// The chain and the name are checked by VerifyConnection.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter})
			return err
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// root connects as the root user and turns authentication on, once.
func (s *sharedEtcd) root(ctx context.Context) (*clientv3.Client, map[string][]byte, error) {
	data, err := s.ensure(ctx)
	if err != nil {
		return nil, nil, err
	}
	cli, err := s.client(ctx, data, data[rootCert], data[rootKey])
	if err != nil {
		return nil, nil, err
	}
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("shared etcd auth status: %w", err)
	}
	if !st.Enabled {
		if _, err := cli.UserAddWithOptions(ctx, rootUser, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			cli.Close()
			return nil, nil, fmt.Errorf("adding the shared etcd's root user: %w", err)
		}
		if _, err := cli.UserGrantRole(ctx, rootUser, rootUser); err != nil {
			cli.Close()
			return nil, nil, fmt.Errorf("granting root its role: %w", err)
		}
		if _, err := cli.AuthEnable(ctx); err != nil {
			cli.Close()
			return nil, nil, fmt.Errorf("turning on the shared etcd's authentication: %w", err)
		}
		s.r.log.Info("shared etcd authentication on", "namespace", s.ns())
	}
	return cli, data, nil
}

// ensureTenant gives the tenant of key (namespace tenantNS) its etcd
// user and role, granted its prefix only, and returns its credentials:
// the pair already in its Secret when still valid, else a new one.
func (s *sharedEtcd) ensureTenant(ctx context.Context, key, tenantNS string) (tenantCreds, error) {
	if creds, ok := s.provisioned(ctx, tenantNS); ok {
		return creds, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cli, data, err := s.root(ctx)
	if err != nil {
		return tenantCreds{}, err
	}
	defer cli.Close()
	user := tenantNS
	from := Prefix(tenantNS) + "/"
	if _, err := cli.RoleAdd(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return tenantCreds{}, fmt.Errorf("adding etcd role %s: %w", user, err)
	}
	if _, err := cli.RoleGrantPermission(ctx, user, from, clientv3.GetPrefixRangeEnd(from), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return tenantCreds{}, fmt.Errorf("granting etcd role %s its prefix: %w", user, err)
	}
	if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return tenantCreds{}, fmt.Errorf("adding etcd user %s: %w", user, err)
	}
	if _, err := cli.UserGrantRole(ctx, user, user); err != nil {
		return tenantCreds{}, fmt.Errorf("granting etcd user %s its role: %w", user, err)
	}
	cert, keyPEM, err := s.tenantPair(ctx, data, tenantNS, user)
	if err != nil {
		return tenantCreds{}, err
	}
	ns := &corev1.Namespace{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Name: tenantNS}, ns); err != nil {
		return tenantCreds{}, fmt.Errorf("getting namespace %s: %w", tenantNS, err)
	}
	if ns.Annotations[AnnotationDatastoreUser] != user {
		patch := client.MergeFrom(ns.DeepCopy())
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		ns.Annotations[AnnotationDatastoreUser] = user
		if err := s.r.c.Patch(ctx, ns, patch); err != nil {
			return tenantCreds{}, fmt.Errorf("recording the etcd user of %s: %w", key, err)
		}
	}
	return tenantCreds{
		ca: data[pki.EtcdCACertFile], cert: cert, key: keyPEM,
		servers: etcdURLs(SharedEtcdName, s.ns(), int(s.r.opts.EtcdReplicas)),
		prefix:  Prefix(tenantNS),
	}, nil
}

// provisioned returns the tenant's credentials without a call to etcd when
// its user is recorded on its namespace and its Secret holds a valid pair
// of that user: a running tenant costs its reconciles no etcd round trip.
func (s *sharedEtcd) provisioned(ctx context.Context, tenantNS string) (tenantCreds, bool) {
	ns := &corev1.Namespace{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Name: tenantNS}, ns); err != nil || ns.Annotations[AnnotationDatastoreUser] != tenantNS {
		return tenantCreds{}, false
	}
	secret := &corev1.Secret{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Namespace: s.ns(), Name: SharedEtcdSecret}, secret); err != nil {
		return tenantCreds{}, false
	}
	cert, key, err := s.tenantPair(ctx, secret.Data, tenantNS, tenantNS)
	if err != nil {
		return tenantCreds{}, false
	}
	existing := &corev1.Secret{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: SecretName}, existing); err != nil || string(existing.Data[datastoreCert]) != string(cert) {
		return tenantCreds{}, false // a new pair: grant it through etcd first
	}
	return tenantCreds{
		ca: secret.Data[pki.EtcdCACertFile], cert: cert, key: key,
		servers: etcdURLs(SharedEtcdName, s.ns(), int(s.r.opts.EtcdReplicas)),
		prefix:  Prefix(tenantNS),
	}, true
}

// tenantPair returns the tenant's client pair from its Secret when it is
// user's, from the shared CA and not due for renewal; else a new one.
func (s *sharedEtcd) tenantPair(ctx context.Context, data map[string][]byte, tenantNS, user string) (certPEM, keyPEM []byte, err error) {
	ca, err := pki.ParseKeyPair(data[pki.EtcdCACertFile], data[pki.EtcdCAKeyFile])
	if err != nil {
		return nil, nil, fmt.Errorf("the shared etcd's CA: %w", err)
	}
	existing := &corev1.Secret{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: SecretName}, existing); err == nil {
		if kp, err := pki.ParseKeyPair(existing.Data[datastoreCert], existing.Data[datastoreKey]); err == nil &&
			kp.Cert.Subject.CommonName == user && kp.Cert.CheckSignatureFrom(ca.Cert) == nil &&
			time.Until(kp.Cert.NotAfter) > pki.RenewBefore {
			return existing.Data[datastoreCert], existing.Data[datastoreKey], nil
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, nil, fmt.Errorf("getting Secret %s/%s: %w", tenantNS, SecretName, err)
	}
	kp, err := ca.Issue(pki.CertSpec{CommonName: user, Usages: pki.UsageClient})
	if err != nil {
		return nil, nil, fmt.Errorf("issuing the etcd pair of %s: %w", user, err)
	}
	return kp.CertPEM(), kp.KeyPEM(), nil
}

// tenantReady reports whether the shared etcd has a quorum and the tenant
// of tenantNS its user.
func (s *sharedEtcd) tenantReady(ctx context.Context, tenantNS string) (bool, error) {
	ns := &corev1.Namespace{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Name: tenantNS}, ns); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if ns.Annotations[AnnotationDatastoreUser] == "" {
		return false, nil
	}
	sts := &appsv1.StatefulSet{}
	if err := s.r.c.Get(ctx, client.ObjectKey{Namespace: s.ns(), Name: SharedEtcdName}, sts); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return sts.Status.ReadyReplicas >= s.r.opts.EtcdReplicas/2+1, nil
}

// removeTenant deletes the tenant's keys, user and role.
func (s *sharedEtcd) removeTenant(ctx context.Context, tenantNS string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cli, _, err := s.root(ctx)
	if err != nil {
		return fmt.Errorf("removing %s from the shared etcd: %w", tenantNS, err)
	}
	defer cli.Close()
	// The user first: the tenant's API servers still run (they go with the
	// namespace, after this), and a key they wrote after the prefix was
	// emptied would stay behind. Once the user is gone every write of
	// theirs is refused, so the prefix stays empty.
	if _, err := cli.UserDelete(ctx, tenantNS); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("deleting etcd user %s: %w", tenantNS, err)
	}
	if _, err := cli.RoleDelete(ctx, tenantNS); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("deleting etcd role %s: %w", tenantNS, err)
	}
	if _, err := cli.Delete(ctx, Prefix(tenantNS)+"/", clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("deleting the keys of %s: %w", tenantNS, err)
	}
	s.r.log.Info("tenant removed from the shared etcd", "tenant", tenantNS)
	return nil
}
