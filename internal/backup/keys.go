package backup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Keyspace is the part of the etcd client a key export and import need.
type Keyspace interface {
	clientv3.KV
	clientv3.Lease
}

// keysMagic opens every key export; etcd's own snapshots (bbolt files)
// never start with it.
const keysMagic = "fke-etcd-keys\x00v1\n"

// APIServerPrefix is the key prefix of a Kubernetes API server whose
// --etcd-prefix is the default: what an etcd snapshot of a dedicated
// etcd holds the cluster's objects under.
const APIServerPrefix = "/registry"

// DefaultLeaseTTL is given to an imported key whose lease's time to live
// could not be read (a user without the right to read it).
const DefaultLeaseTTL = time.Hour

// exportPage is how many keys one read of an export returns.
const exportPage = 500

// TakeKeys exports every key under prefix+"/" of kv (a tenant's part of a
// shared etcd, or the API server's prefix of an etcd of its own), at one
// revision, into snapshot now of d (FormatKeys). Keys are stored relative
// to prefix, so an import may put them under another one; a key with a
// lease keeps its lease's time to live.
func TakeKeys(ctx context.Context, kv Keyspace, prefix string, d Dir, now time.Time, uid string) (Snapshot, error) {
	if err := checkPrefix(prefix); err != nil {
		return Snapshot{}, err
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("creating backup directory: %w", err)
	}
	start, end := prefix+"/", clientv3.GetPrefixRangeEnd(prefix+"/")
	first, err := kv.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(exportPage))
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading the keys under %s: %w", prefix, err)
	}
	s := Snapshot{Name: now.UTC().Format(TimeFormat), Time: now.UTC().Truncate(time.Second), Revision: first.Header.Revision, ClusterUID: uid, Format: FormatKeys}
	ttls := map[int64]int64{}
	return write(d, s, func(w io.Writer) error {
		if _, err := io.WriteString(w, keysMagic); err != nil {
			return err
		}
		resp := first
		for {
			for _, e := range resp.Kvs {
				ttl := leaseTTL(ctx, kv, e.Lease, ttls)
				if err := writeRecord(w, record{key: e.Key[len(prefix):], value: e.Value, lease: e.Lease, ttl: ttl}); err != nil {
					return err
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return nil
			}
			next := append(bytes.Clone(resp.Kvs[len(resp.Kvs)-1].Key), 0)
			if resp, err = kv.Get(ctx, string(next), clientv3.WithRange(end), clientv3.WithLimit(exportPage), clientv3.WithRev(s.Revision)); err != nil {
				return fmt.Errorf("reading the keys under %s at revision %d: %w", prefix, s.Revision, err)
			}
		}
	})
}

// leaseTTL returns the remaining seconds of lease id (0: none), asking
// etcd once per lease; a lease it does not tell gets DefaultLeaseTTL.
func leaseTTL(ctx context.Context, l clientv3.Lease, id int64, cache map[int64]int64) int64 {
	if id == 0 {
		return 0
	}
	if ttl, ok := cache[id]; ok {
		return ttl
	}
	ttl := int64(DefaultLeaseTTL / time.Second)
	if resp, err := l.TimeToLive(ctx, clientv3.LeaseID(id)); err == nil && resp.TTL > 0 {
		ttl = resp.TTL
	}
	cache[id] = ttl
	return ttl
}

// record is one exported key: relative to the export's prefix, with the
// id of its lease where it had one (0: none; kept as etcd had it, though
// an import groups leased keys by time to live, see leaseMinute) and that
// lease's remaining seconds.
type record struct {
	key, value []byte
	lease, ttl int64
}

func writeRecord(w io.Writer, r record) error {
	var buf []byte
	buf = binary.AppendUvarint(buf, uint64(len(r.key)))
	buf = append(buf, r.key...)
	buf = binary.AppendUvarint(buf, uint64(len(r.value)))
	buf = append(buf, r.value...)
	buf = binary.AppendVarint(buf, r.lease)
	buf = binary.AppendVarint(buf, r.ttl)
	_, err := w.Write(buf)
	return err
}

// maxRecordField bounds a key's or a value's length read from a file
// (etcd's own limit on a request is 1.5 MiB by default).
const maxRecordField = 64 << 20

func readRecord(r *bufio.Reader) (record, error) {
	var rec record
	field := func() ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if n > maxRecordField {
			return nil, fmt.Errorf("a field of %d bytes", n)
		}
		b := make([]byte, n)
		_, err = io.ReadFull(r, b)
		return b, err
	}
	var err error
	if rec.key, err = field(); err != nil {
		return rec, err // io.EOF here: the end of the file
	}
	if rec.value, err = field(); err != nil {
		return rec, truncated(err)
	}
	if rec.lease, err = binary.ReadVarint(r); err != nil {
		return rec, truncated(err)
	}
	if rec.ttl, err = binary.ReadVarint(r); err != nil {
		return rec, truncated(err)
	}
	return rec, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func checkPrefix(prefix string) error {
	if !strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("key prefix %q: it must start with / and not end with one", prefix)
	}
	return nil
}

// IsKeys reports whether the snapshot file at path is a key export
// (FormatKeys) rather than an etcd snapshot.
func IsKeys(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, len(keysMagic))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	return string(head[:n]) == keysMagic, nil
}

// ImportKeys makes the keys under prefix+"/" of kv those of the snapshot
// file at path: a key export (FormatKeys), or an etcd snapshot
// (FormatEtcd), whose keys under APIServerPrefix it takes. Keys already
// under prefix are deleted first, so an import cut short is done again
// whole. Keys that had a lease get a new one with the time to live they
// had left, rounded up to the minute. It returns how many keys it put. Nothing may write under
// prefix meanwhile (the API server must not run yet).
func ImportKeys(ctx context.Context, kv Keyspace, path, prefix string) (int, error) {
	if err := checkPrefix(prefix); err != nil {
		return 0, err
	}
	keys, err := IsKeys(path)
	if err != nil {
		return 0, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	var recs []record
	if keys {
		recs, err = readKeys(path)
	} else {
		recs, err = readEtcdSnapshot(path, APIServerPrefix)
	}
	if err != nil {
		return 0, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	if _, err := kv.Delete(ctx, prefix+"/", clientv3.WithPrefix()); err != nil {
		return 0, fmt.Errorf("clearing the keys under %s: %w", prefix, err)
	}
	// One lease per minute of time to live, as the API server itself
	// shares a lease among the events it writes within a minute: a
	// tenant's hundreds of events cost a few grants, not one each.
	leases := map[int64]clientv3.LeaseID{}
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("writing keys under %s: %w", prefix, err)
		}
		ops, size = ops[:0], 0
		return nil
	}
	for _, rec := range recs {
		var opts []clientv3.OpOption
		if rec.lease != 0 {
			ttl := leaseMinute(rec.ttl)
			id, ok := leases[ttl]
			if !ok {
				resp, err := kv.Grant(ctx, ttl)
				if err != nil {
					return 0, fmt.Errorf("granting a lease of %d s: %w", ttl, err)
				}
				id = resp.ID
				leases[ttl] = id
			}
			opts = append(opts, clientv3.WithLease(id))
		}
		n := len(prefix) + len(rec.key) + len(rec.value)
		if len(ops) == importOps || (len(ops) > 0 && size+n > importBytes) {
			if err := flush(); err != nil {
				return 0, err
			}
		}
		ops = append(ops, clientv3.OpPut(prefix+string(rec.key), string(rec.value), opts...))
		size += n
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return len(recs), nil
}

// leaseMinute is the time to live an imported key's lease gets for ttl
// seconds left (0 or less: not known, DefaultLeaseTTL): rounded up to
// the minute.
func leaseMinute(ttl int64) int64 {
	if ttl <= 0 {
		ttl = int64(DefaultLeaseTTL / time.Second)
	}
	return (ttl + 59) / 60 * 60
}

// A transaction of an import holds at most importOps puts (etcd's
// --max-txn-ops is 128 by default) and importBytes of keys and values
// (its --max-request-bytes is 1.5 MiB); a larger key stands alone.
const (
	importOps   = 128
	importBytes = 1 << 20
)

func readKeys(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	if _, err := r.Discard(len(keysMagic)); err != nil {
		return nil, err
	}
	var recs []record
	for {
		rec, err := readRecord(r)
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", len(recs)+1, err)
		}
		if !strings.HasPrefix(string(rec.key), "/") {
			return nil, fmt.Errorf("key %d (%q) is not a relative key", len(recs)+1, rec.key)
		}
		recs = append(recs, rec)
	}
}

// readEtcdSnapshot reads the live keys under from+"/" of an etcd snapshot
// (a bbolt file): its "key" bucket holds every revision not compacted
// away, in revision order, a deletion marked by a trailing 't'; its
// "lease" bucket the leases.
func readEtcdSnapshot(path, from string) ([]record, error) {
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("not an etcd snapshot: %w", err)
	}
	defer db.Close()
	live := map[string]record{}
	ttls := map[int64]int64{}
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("not an etcd snapshot: it has no key bucket")
		}
		if err := b.ForEach(func(rev, v []byte) error {
			kv := &mvccpb.KeyValue{}
			if err := proto.Unmarshal(v, kv); err != nil {
				return fmt.Errorf("revision %x: %w", rev, err)
			}
			key := string(kv.Key)
			if !strings.HasPrefix(key, from+"/") {
				return nil
			}
			if len(rev) == 18 && rev[17] == 't' {
				delete(live, key)
				return nil
			}
			live[key] = record{key: kv.Key[len(from):], value: kv.Value, lease: kv.Lease}
			return nil
		}); err != nil {
			return err
		}
		if lb := tx.Bucket([]byte("lease")); lb != nil {
			return lb.ForEach(func(_, v []byte) error {
				id, ttl, remaining := leaseFields(v)
				if remaining > 0 {
					ttl = remaining
				}
				ttls[id] = ttl
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	recs := make([]record, 0, len(live))
	for _, rec := range live {
		if rec.lease != 0 {
			rec.ttl = ttls[rec.lease]
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return bytes.Compare(recs[i].key, recs[j].key) < 0 })
	return recs, nil
}

// leaseFields decodes etcd's stored lease (leasepb.Lease: ID = 1, TTL = 2,
// RemainingTTL = 3, all int64), skipping fields it does not know.
func leaseFields(b []byte) (id, ttl, remaining int64) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if typ != protowire.VarintType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return
		}
		b = b[n:]
		switch num {
		case 1:
			id = int64(v)
		case 2:
			ttl = int64(v)
		case 3:
			remaining = int64(v)
		}
	}
	return
}
