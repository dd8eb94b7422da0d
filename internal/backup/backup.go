// Package backup takes, lists, checks and prunes etcd snapshots of tenant
// clusters. A snapshot is the file <name>.db and <name>.json beside it
// (time, size, SHA-256, revision, format); a snapshot whose file does not
// match its checksum is refused. The file is either etcd's own snapshot
// format (FormatEtcd: the whole etcd, read through the etcd client's
// Maintenance API) or a key export (FormatKeys: the keys under one
// prefix, for a tenant that shares its etcd; see TakeKeys), both
// consistent at one revision.
//
// Schedules are cron expressions (robfig/cron's standard parser); Due and
// Prune are pure.
package backup

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TimeFormat names snapshots by the time they were taken (UTC).
const TimeFormat = "20060102T150405Z"

// Snapshot describes one snapshot file.
type Snapshot struct {
	Name     string    `json:"name"`
	Time     time.Time `json:"time"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	Revision int64     `json:"revision"`
	// ClusterUID is the UID of the Cluster object it was taken of: the keys
	// that open its Secrets are kept under it (see KeysSecretName), also
	// once that cluster is deleted.
	ClusterUID string `json:"clusterUID,omitempty"`
	// Format is FormatEtcd (also when empty) or FormatKeys.
	Format string `json:"format,omitempty"`
}

// Snapshot formats.
const (
	FormatEtcd = "etcd"
	FormatKeys = "keys"
)

// KeysSecretName names the management-plane Secret that keeps the CAs and
// keys a snapshot of the cluster with uid needs to be restored: it has no
// owner, so it outlives the cluster (as its snapshots do).
func KeysSecretName(uid string) string { return "restore-keys-" + uid }

// Dir holds one cluster's snapshots.
type Dir string

// File is the path of snapshot name's data.
func (d Dir) File(name string) string { return filepath.Join(string(d), name+".db") }

func (d Dir) meta(name string) string { return filepath.Join(string(d), name+".json") }

// Maintenance is the part of the etcd client a snapshot needs.
type Maintenance interface {
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
	Snapshot(ctx context.Context) (io.ReadCloser, error)
}

// Take streams a snapshot of the etcd at endpoint (of the cluster with
// uid) into d as of now, computing its checksum on the way; the file
// appears only once complete.
func Take(ctx context.Context, m Maintenance, endpoint string, d Dir, now time.Time, uid string) (Snapshot, error) {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("creating backup directory: %w", err)
	}
	st, err := m.Status(ctx, endpoint)
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd status: %w", err)
	}
	rc, err := m.Snapshot(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("starting etcd snapshot: %w", err)
	}
	defer rc.Close()
	s := Snapshot{Name: now.UTC().Format(TimeFormat), Time: now.UTC().Truncate(time.Second), Revision: st.Header.Revision, ClusterUID: uid}
	return write(d, s, func(w io.Writer) error {
		if _, err := io.Copy(w, rc); err != nil {
			return fmt.Errorf("writing etcd snapshot: %w", err)
		}
		return nil
	})
}

// ErrExists says d already keeps a snapshot of the name a new one would
// take (snapshots are named by the second they are taken in): a snapshot
// recorded, and perhaps uploaded, is never replaced by another.
var ErrExists = errors.New("a snapshot of that name is already kept")

// NextName is when a snapshot named after another one taken at t may be
// taken: the start of the next second.
func NextName(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// write stores snapshot s of d: fill writes its data, whose size and
// checksum write records with it. The file appears only once complete; a
// snapshot of s's name already kept is an ErrExists.
func write(d Dir, s Snapshot, fill func(io.Writer) error) (Snapshot, error) {
	for _, p := range []string{d.meta(s.Name), d.File(s.Name)} {
		if _, err := os.Lstat(p); err == nil {
			return Snapshot{}, fmt.Errorf("snapshot %s: %w", s.Name, ErrExists)
		}
	}
	tmp := d.File(s.Name) + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return Snapshot{}, err
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, 1<<16)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return Snapshot{}, err
	}
	s.Size, s.SHA256 = cw.n, hex.EncodeToString(h.Sum(nil))
	meta, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(d.meta(s.Name), meta, 0o600); err != nil {
		os.Remove(tmp)
		return Snapshot{}, err
	}
	if err := os.Rename(tmp, d.File(s.Name)); err != nil {
		os.Remove(d.meta(s.Name))
		return Snapshot{}, err
	}
	return s, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// List returns d's complete snapshots, oldest first.
func List(d Dir) ([]Snapshot, error) {
	metas, err := filepath.Glob(filepath.Join(string(d), "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, m := range metas {
		name := strings.TrimSuffix(filepath.Base(m), ".json")
		if _, err := os.Stat(d.File(name)); err != nil {
			continue // being written, or half removed
		}
		s, err := read(d, name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func read(d Dir, name string) (Snapshot, error) {
	data, err := os.ReadFile(d.meta(name))
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	return s, nil
}

// ErrChecksum says a snapshot file does not match its recorded checksum.
var ErrChecksum = errors.New("snapshot does not match its checksum")

// Verify checks snapshot name of d against its checksum and size and
// returns it.
func Verify(d Dir, name string) (Snapshot, error) {
	if !validName(name) {
		return Snapshot{}, fmt.Errorf("snapshot name %q: not a snapshot name", name)
	}
	s, err := read(d, name)
	if err != nil {
		return Snapshot{}, err
	}
	f, err := os.Open(d.File(name))
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != s.Size || got != s.SHA256 {
		return Snapshot{}, fmt.Errorf("snapshot %s (%d bytes, sha256 %s; recorded %d bytes, %s): %w", name, n, got, s.Size, s.SHA256, ErrChecksum)
	}
	return s, nil
}

// Prune removes all but the newest retain snapshots of d and returns the
// ones kept, oldest first.
func Prune(d Dir, retain int) ([]Snapshot, error) {
	all, err := List(d)
	if err != nil {
		return nil, err
	}
	drop, keep := Split(all, retain)
	for _, s := range drop {
		if err := os.Remove(d.File(s.Name)); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		if err := os.Remove(d.meta(s.Name)); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return keep, nil
}

// Split divides snapshots (oldest first) into those beyond retain (the
// oldest) and those kept.
func Split(snapshots []Snapshot, retain int) (drop, keep []Snapshot) {
	if retain < 1 {
		retain = 1
	}
	if len(snapshots) <= retain {
		return nil, snapshots
	}
	cut := len(snapshots) - retain
	return snapshots[:cut], snapshots[cut:]
}

// ParseSchedule parses a cron expression: five fields (minute hour day
// month weekday) or a descriptor such as @hourly, @daily or @every 6h.
func ParseSchedule(expr string) (cron.Schedule, error) {
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, fmt.Errorf("backup schedule %q: %w (write five fields, e.g. \"0 3 * * *\", or @daily, @every 6h)", expr, err)
	}
	return s, nil
}

// Due returns when the next scheduled snapshot is due after the last one
// (or after created, for a cluster without snapshots).
func Due(s cron.Schedule, last, created time.Time) time.Time {
	from := last
	if from.IsZero() {
		from = created
	}
	return s.Next(from.UTC())
}
