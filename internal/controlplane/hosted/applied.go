package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reapplyAfter bounds how long the runtime trusts its last apply of an
// object: one unchanged since is applied again only after this long.
//
// The cluster controller calls Ensure every 500 ms while a plane starts
// (StartPollInterval) and every 10 s once it runs; each call renders about
// ten objects, and a server-side apply of an unchanged one still costs the
// management API server a decode, a merge of the managed fields and a
// comparison. With many planes on a small management cluster those no-op
// applies are a large share of its API server's CPU (bench/README). An
// object someone else changed or deleted is put back within reapplyAfter;
// the runtime's own writes other than applies (Stop, an upgrade's version,
// a removed addon) forget the namespace, so its next Ensure applies
// everything.
const reapplyAfter = time.Minute

// appliedSet remembers, per object, the hash of what was last applied and
// when. Safe for concurrent use; the zero value is empty and usable.
type appliedSet struct {
	mu sync.Mutex
	m  map[appliedKey]appliedEntry
}

type appliedKey struct{ kind, namespace, name string }

type appliedEntry struct {
	hash string
	at   time.Time
}

func keyOf(o client.Object) appliedKey {
	return appliedKey{o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName()}
}

// objectHash is the hash of o as it would be sent.
func objectHash(o client.Object) (string, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// needs reports whether an object with key k and hash must be applied at
// now: it was never applied, or differently, or longer than reapplyAfter
// ago.
func (s *appliedSet) needs(k appliedKey, hash string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	return !ok || e.hash != hash || now.Sub(e.at) >= reapplyAfter || now.Before(e.at)
}

// done records that the object with key k and hash was applied at now.
func (s *appliedSet) done(k appliedKey, hash string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[appliedKey]appliedEntry{}
	}
	s.m[k] = appliedEntry{hash: hash, at: now}
}

// forget drops what is known of the object with key k.
func (s *appliedSet) forget(k appliedKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// forgetNamespace drops what is known of namespace ns and of every object
// in it.
func (s *appliedSet) forgetNamespace(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.m {
		if k.namespace == ns || (k.kind == "Namespace" && k.name == ns) {
			delete(s.m, k)
		}
	}
}
