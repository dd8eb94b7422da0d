package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
)

// Store is an object store (an S3-compatible bucket) that keeps copies of
// snapshots. Keys are slash-separated; every method may be called
// concurrently.
type Store interface {
	// Put stores size bytes read from r as object key, replacing any
	// object of that key. The object is visible whole or not at all; on
	// error nothing is known of it (the caller puts it again).
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens object key for reading; the caller closes it. A key
	// without an object gives an error for which errors.Is(err,
	// ErrNotFound) holds.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys of all objects whose key begins with prefix,
	// in any order, however many requests that takes.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes object key; removing a key without an object is no
	// error.
	Delete(ctx context.Context, key string) error
	// String names the store in messages, e.g. "s3://bucket at https://host".
	String() string
}

// ErrNotFound says a store holds no object of a key.
var ErrNotFound = errors.New("no such object")

// Remote is one cluster's folder in a store: its snapshots are the objects
// <Prefix><name>.db and <Prefix><name>.json (the same JSON as a local
// snapshot's).
type Remote struct {
	Store Store
	// Prefix ends with "/" (see ClusterPrefix).
	Prefix string
}

// ClusterPrefix is the folder of the snapshots of cluster namespace/name
// under prefix (empty: the whole bucket): "<prefix>/<namespace>/<name>/".
func ClusterPrefix(prefix, namespace, name string) string {
	return strings.TrimPrefix(path.Join(prefix, namespace, name)+"/", "/")
}

// DataKey and MetaKey are the keys of snapshot name's data and metadata.
func (r Remote) DataKey(name string) string { return r.Prefix + name + ".db" }

// MetaKey: see DataKey.
func (r Remote) MetaKey(name string) string { return r.Prefix + name + ".json" }

// String names the folder in messages.
func (r Remote) String() string { return r.Store.String() + ", folder " + r.Prefix }

// Upload checks local snapshot name of d against its checksum and copies
// it to r: the data first, then the metadata, so that a snapshot is listed
// in r only once its data is there.
func Upload(ctx context.Context, r Remote, d Dir, name string) (Snapshot, error) {
	s, err := Verify(d, name)
	if err != nil {
		return Snapshot{}, err
	}
	f, err := os.Open(d.File(name))
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer f.Close()
	if err := r.Store.Put(ctx, r.DataKey(name), f, s.Size); err != nil {
		return Snapshot{}, err
	}
	meta, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return Snapshot{}, err
	}
	if err := r.Store.Put(ctx, r.MetaKey(name), strings.NewReader(string(meta)), int64(len(meta))); err != nil {
		return Snapshot{}, err
	}
	return s, nil
}

// ListRemote returns the snapshots in r (both objects there), oldest first.
func ListRemote(ctx context.Context, r Remote) ([]Snapshot, error) {
	keys, err := r.Store.List(ctx, r.Prefix)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	var out []Snapshot
	for _, k := range keys {
		name, ok := strings.CutSuffix(strings.TrimPrefix(k, r.Prefix), ".json")
		if !ok || !validName(name) || !have[r.DataKey(name)] {
			continue // another object, or a snapshot half uploaded or half removed
		}
		s, err := readRemoteMeta(ctx, r, name)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func readRemoteMeta(ctx context.Context, r Remote, name string) (Snapshot, error) {
	rc, err := r.Store.Get(ctx, r.MetaKey(name))
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading %s: %w", r.MetaKey(name), err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading %s: %w", r.MetaKey(name), err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return Snapshot{}, fmt.Errorf("object %s is not a snapshot's metadata: %w", r.MetaKey(name), err)
	}
	if s.Name != name {
		return Snapshot{}, fmt.Errorf("object %s describes snapshot %q, not %s", r.MetaKey(name), s.Name, name)
	}
	return s, nil
}

// Download copies snapshot name from r into d, checking the data against
// the checksum and size recorded beside it in r, and against wantSHA256
// when that is not empty (the checksum the management plane recorded when
// the snapshot was taken). The local copy appears only once it matches;
// a mismatch is an ErrChecksum and leaves d as it was.
func Download(ctx context.Context, r Remote, name string, d Dir, wantSHA256 string) (Snapshot, error) {
	if !validName(name) {
		return Snapshot{}, fmt.Errorf("snapshot name %q: not a snapshot name", name)
	}
	s, err := readRemoteMeta(ctx, r, name)
	if err != nil {
		return Snapshot{}, err
	}
	if wantSHA256 != "" && s.SHA256 != wantSHA256 {
		return Snapshot{}, fmt.Errorf("object %s records sha256 %s, but the snapshot was taken with %s: %w", r.MetaKey(name), s.SHA256, wantSHA256, ErrChecksum)
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("creating backup directory: %w", err)
	}
	rc, err := r.Store.Get(ctx, r.DataKey(name))
	if err != nil {
		return Snapshot{}, fmt.Errorf("downloading %s: %w", r.DataKey(name), err)
	}
	defer rc.Close()
	// A file of its own: another restore may download the same snapshot.
	f, err := os.CreateTemp(string(d), name+".download-*")
	if err != nil {
		return Snapshot{}, err
	}
	tmp := f.Name()
	h := sha256.New()
	// One byte more than recorded is enough to tell a longer object.
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(rc, s.Size+1))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return Snapshot{}, fmt.Errorf("downloading %s: %w", r.DataKey(name), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != s.Size || got != s.SHA256 {
		os.Remove(tmp)
		return Snapshot{}, fmt.Errorf("object %s (%d bytes, sha256 %s; recorded %d bytes, %s): %w", r.DataKey(name), n, got, s.Size, s.SHA256, ErrChecksum)
	}
	meta, err := json.MarshalIndent(s, "", "  ")
	if err == nil {
		err = os.WriteFile(d.meta(name), meta, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, d.File(name))
	}
	if err != nil {
		os.Remove(tmp)
		return Snapshot{}, fmt.Errorf("keeping the downloaded snapshot %s: %w", name, err)
	}
	return s, nil
}

// DeleteRemote removes snapshot name from r: the metadata first, so that
// a snapshot half removed is not listed.
func DeleteRemote(ctx context.Context, r Remote, name string) error {
	if err := r.Store.Delete(ctx, r.MetaKey(name)); err != nil {
		return err
	}
	return r.Store.Delete(ctx, r.DataKey(name))
}

// PlanSync decides how a store with the snapshots remote follows the
// local ones (both oldest first) when retain are kept: the store keeps
// the newest retain of all the snapshots either side has. upload are the
// local snapshots among those that the store lacks (a snapshot whose
// upload failed is among them again next time), prune the store's
// snapshots beyond them. Pure.
func PlanSync(local, remote []Snapshot, retain int) (upload, prune []Snapshot) {
	inRemote := map[string]bool{}
	all := slices.Clone(remote)
	for _, s := range remote {
		inRemote[s.Name] = true
	}
	for _, s := range local {
		if !inRemote[s.Name] {
			all = append(all, s)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	drop, keep := Split(all, retain)
	for _, s := range keep {
		if !inRemote[s.Name] {
			upload = append(upload, s)
		}
	}
	for _, s := range drop {
		if inRemote[s.Name] {
			prune = append(prune, s)
		}
	}
	return upload, prune
}

// SyncResult says what Sync did.
type SyncResult struct {
	// Uploaded and Pruned are the snapshots copied to and removed from the store.
	Uploaded, Pruned []string
	// Corrupt are local snapshots not uploaded because they fail their
	// checksum.
	Corrupt []string
	// Remote is what the store holds afterwards, oldest first, when
	// Listed: the store could be listed.
	Remote []Snapshot
	Listed bool
}

// Sync makes r follow the local snapshots of d (PlanSync): it uploads the
// ones r lacks, then prunes r to retain. It goes on past a failed upload
// (the others may work) and returns the first error with what it did;
// it prunes only when every upload worked. A local snapshot that fails
// its checksum is not uploaded (SyncResult.Corrupt) and no error.
func Sync(ctx context.Context, r Remote, d Dir, retain int) (SyncResult, error) {
	var res SyncResult
	local, err := List(d)
	if err != nil {
		return res, err
	}
	remote, err := ListRemote(ctx, r)
	if err != nil {
		return res, err
	}
	res.Listed = true
	upload, _ := PlanSync(local, remote, retain)
	var first error
	for _, s := range upload {
		up, err := Upload(ctx, r, d, s.Name)
		if errors.Is(err, ErrChecksum) {
			// Trying again cannot help: say so, and go on as if it
			// were not there.
			res.Corrupt = append(res.Corrupt, s.Name)
			continue
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		res.Uploaded = append(res.Uploaded, up.Name)
		remote = append(remote, up)
	}
	if first == nil {
		// Only once every snapshot kept is there, never leaving the store
		// with fewer than it had; a corrupt local snapshot takes no place.
		good := slices.DeleteFunc(slices.Clone(local), func(s Snapshot) bool { return slices.Contains(res.Corrupt, s.Name) })
		_, prune := PlanSync(good, remote, retain)
		for _, s := range prune {
			if err := DeleteRemote(ctx, r, s.Name); err != nil {
				first = err
				break
			}
			res.Pruned = append(res.Pruned, s.Name)
			remote = slices.DeleteFunc(remote, func(x Snapshot) bool { return x.Name == s.Name })
		}
	}
	sort.Slice(remote, func(i, j int) bool { return remote[i].Name < remote[j].Name })
	res.Remote = remote
	return res, first
}

// validName reports whether name may name a snapshot's files.
func validName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && !strings.HasPrefix(name, ".")
}
