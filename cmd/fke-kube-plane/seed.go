package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
	schedulingrest "k8s.io/kubernetes/pkg/registry/scheduling/rest"
)

// A seed holds the objects that kube-apiserver's post-start hooks create
// alike in every new cluster of one version: the bootstrap RBAC roles and
// bindings, the system priority classes and API priority and fairness'
// configuration. A plane that starts on an empty datastore without a seed
// saves one once it is ready; a plane that starts on an empty datastore
// with one writes its objects into etcd (each with a new UID and creation
// time) before the API server's hooks look for them, so that the hooks,
// which wait a second and then create about 150 objects one by one, find
// them there and only read (bench/README, "Where the last second goes").
// Nothing in a seed belongs to a tenant: only objects marked as upstream's
// defaults are saved (see seedable), and a seed is written only into an
// empty datastore, never over an object (each write is conditional on
// the key being absent).

// seedResources are the resources (etcd key prefixes under the storage
// prefix) a seed holds.
var seedResources = []string{
	"clusterroles", "clusterrolebindings", "roles", "rolebindings",
	"priorityclasses", "flowschemas", "prioritylevelconfigurations",
}

// seedFile is a seed as stored: the etcd keys and values (as the API
// server stores them: protobuf) and the version of the plane that saved
// it.
type seedFile struct {
	Version string   `json:"version"`
	Objects []seedKV `json:"objects"`
}

type seedKV struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// storageCodec reads and writes the API server's stored objects.
var storageCodec = protobuf.NewSerializer(legacyscheme.Scheme, legacyscheme.Scheme)

// seedable says whether a stored object is one of upstream's defaults,
// the same in every cluster of the version: bootstrap RBAC (labelled
// kubernetes.io/bootstrapping=rbac-defaults), the system priority classes
// (named system-*, a prefix only the API server may use), and API
// priority and fairness objects it keeps up to date
// (apf.kubernetes.io/autoupdate-spec).
func seedable(resource string, obj metav1.Object) bool {
	switch resource {
	case "priorityclasses":
		return strings.HasPrefix(obj.GetName(), "system-")
	case "flowschemas", "prioritylevelconfigurations":
		_, ok := obj.GetAnnotations()["apf.kubernetes.io/autoupdate-spec"]
		return ok
	default:
		return obj.GetLabels()["kubernetes.io/bootstrapping"] == "rbac-defaults"
	}
}

// decodeStored decodes a stored value into an object and its metadata.
func decodeStored(value []byte) (runtime.Object, metav1.Object, error) {
	obj, _, err := storageCodec.Decode(value, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	return obj, m, nil
}

// encodeStored encodes obj as the API server stores it.
func encodeStored(obj runtime.Object) ([]byte, error) {
	var b bytes.Buffer
	if err := storageCodec.Encode(obj, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// renewIdentity returns value with a new UID and creation time, so that
// no two clusters share an object's identity.
func renewIdentity(value []byte, now time.Time) ([]byte, error) {
	obj, m, err := decodeStored(value)
	if err != nil {
		return nil, err
	}
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.NewTime(now))
	m.SetResourceVersion("")
	return encodeStored(obj)
}

// readSeed reads the seed at path; nil when there is none.
func readSeed(path, version string) (*seedFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s seedFile
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("seed %s: %w", path, err)
	}
	if s.Version != version {
		return nil, fmt.Errorf("seed %s is of version %s, this plane is %s", path, s.Version, version)
	}
	return &s, nil
}

// datastoreEmpty says whether etcd holds no key under the storage prefix.
func datastoreEmpty(ctx context.Context, cli *clientv3.Client, prefix string) (bool, error) {
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return resp.Count == 0, nil
}

// plantSeed writes s's objects, with new identities, under prefix, each
// only where its key is absent, and returns how many it wrote.
func plantSeed(ctx context.Context, cli *clientv3.Client, prefix string, s *seedFile) (int, error) {
	now := time.Now()
	written := 0
	for _, kv := range s.Objects {
		if !seedKey(prefix, kv.Key) {
			return written, fmt.Errorf("seed key %q is outside the seed's resources", kv.Key)
		}
		value, err := renewIdentity(kv.Value, now)
		if err != nil {
			return written, fmt.Errorf("seed object %s: %w", kv.Key, err)
		}
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(kv.Key), "=", 0)).
			Then(clientv3.OpPut(kv.Key, string(value))).
			Commit()
		if err != nil {
			return written, err
		}
		if resp.Succeeded {
			written++
		}
	}
	return written, nil
}

// seedKey says whether key lies under one of seedResources.
func seedKey(prefix, key string) bool {
	for _, r := range seedResources {
		if strings.HasPrefix(key, prefix+"/"+r+"/") {
			return true
		}
	}
	return false
}

// saveSeed reads upstream's default objects from etcd and writes them to
// path (atomically: a plane starting meanwhile reads the old file or the
// new one, whole).
func saveSeed(ctx context.Context, cli *clientv3.Client, prefix, path, version string) (int, error) {
	s := seedFile{Version: version}
	for _, r := range seedResources {
		resp, err := cli.Get(ctx, prefix+"/"+r+"/", clientv3.WithPrefix())
		if err != nil {
			return 0, err
		}
		for _, kv := range resp.Kvs {
			obj, m, err := decodeStored(kv.Value)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", kv.Key, err)
			}
			if !seedable(r, m) {
				continue
			}
			value := kv.Value
			if cr, ok := obj.(*rbacv1.ClusterRole); ok && cr.AggregationRule != nil && len(cr.Rules) > 0 {
				// An aggregated role's rules are the controller manager's
				// union of this cluster's labelled roles; each cluster's
				// computes its own.
				cr.Rules = nil
				if value, err = encodeStored(cr); err != nil {
					return 0, fmt.Errorf("%s: %w", kv.Key, err)
				}
			}
			s.Objects = append(s.Objects, seedKV{Key: string(kv.Key), Value: value})
		}
	}
	data, err := json.Marshal(s)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return len(s.Objects), os.Rename(tmp.Name(), path)
}

// seeder plants a plane's seed, or saves one, around its start.
type seeder struct {
	path, prefix, version string
	etcd                  *embed.Etcd
	// save is set when the plane started on an empty datastore without
	// a seed: it saves one once the API server is ready. planted is set
	// when start wrote the whole seed. done is closed when start has
	// decided.
	save, planted bool
	done          chan struct{}
}

func newSeeder(path, prefix, version string, e *embed.Etcd) *seeder {
	return &seeder{path: path, prefix: prefix, version: version, etcd: e, done: make(chan struct{})}
}

// start runs before the API server's hooks (at the plane's start): once
// etcd serves, on an empty datastore, it plants the seed if there is one.
// Failures are logged, not fatal: the hooks create what is missing.
func (s *seeder) start(ctx context.Context) {
	defer close(s.done)
	select {
	case <-s.etcd.Server.ReadyNotify():
	case <-ctx.Done():
		return
	}
	cli := v3client.New(s.etcd.Server)
	defer cli.Close()
	empty, err := datastoreEmpty(ctx, cli, s.prefix)
	if err != nil || !empty {
		if err != nil {
			klog.ErrorS(err, "Seed: reading the datastore")
		}
		return
	}
	seed, err := readSeed(s.path, s.version)
	if err != nil {
		klog.ErrorS(err, "Seed: not used")
		return
	}
	if seed == nil {
		s.save = true
		return
	}
	t0 := time.Now()
	n, err := plantSeed(ctx, cli, s.prefix, seed)
	if err != nil {
		klog.ErrorS(err, "Seed: planting", "written", n)
		return
	}
	s.planted = true
	klog.InfoS("Seed planted", "path", s.path, "objects", n, "took", time.Since(t0))
}

// seededHooks are upstream's post-start hooks that create the objects a
// seed holds. Each waits a second before its first look (wait.Poll), and
// /readyz waits for them. With a seed, the plane disables them and runs
// them in seeder.hook instead.
var seededHooks = []string{rbacrest.PostStartHookName, schedulingrest.PostStartHookName}

// seedHookName is the post-start hook (and /readyz check) that stands for
// seededHooks.
const seedHookName = "fke/seeded-defaults"

// hook is the post-start hook that stands for upstream's seededHooks: it
// waits until start has decided and runs them. When the seed was planted
// (the datastore holds every object they create), it lets /readyz pass
// at once and runs them in the background: they then only read and
// confirm, and an object the seed lacked is still created, as upstream
// would. Otherwise (a restarted plane, no seed, or a failed planting)
// /readyz waits for them, as it does upstream. A hook that fails stops
// the process (upstream's server exits when a post-start hook fails), so
// that its supervisor starts it again.
func (s *seeder) hook(stopped chan<- error) genericapiserver.PostStartHookFunc {
	return func(hc genericapiserver.PostStartHookContext) error {
		select {
		case <-s.done:
		case <-hc.Done():
			return hc.Err()
		}
		if !s.planted {
			return runSeededHooks(hc)
		}
		go func() {
			if err := runSeededHooks(hc); err != nil {
				stopped <- fmt.Errorf("%s: %w", seedHookName, err)
			}
		}()
		return nil
	}
}

// runSeededHooks runs upstream's seededHooks side by side, as the server
// runs its hooks, and returns their errors.
func runSeededHooks(hc genericapiserver.PostStartHookContext) error {
	_, rbac, err := rbacrest.RESTStorageProvider{}.PostStartHook()
	if err != nil {
		return err
	}
	hooks := []genericapiserver.PostStartHookFunc{rbac, schedulingrest.AddSystemPriorityClasses()}
	errs := make(chan error, len(hooks))
	for i, h := range hooks {
		go func() {
			if err := h(hc); err != nil {
				errs <- fmt.Errorf("%s: %w", seededHooks[i], err)
				return
			}
			errs <- nil
		}()
	}
	var all []error
	for range hooks {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// ready runs once the API server is ready: it saves the seed when start
// found an empty datastore and none to plant.
func (s *seeder) ready(ctx context.Context) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return
	}
	if !s.save {
		return
	}
	cli := v3client.New(s.etcd.Server)
	defer cli.Close()
	n, err := saveSeed(ctx, cli, s.prefix, s.path, s.version)
	if err != nil {
		klog.ErrorS(err, "Seed: saving", "path", s.path)
		return
	}
	klog.InfoS("Seed saved", "path", s.path, "objects", n)
}
