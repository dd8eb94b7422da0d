package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/backup/storetest"
)

func names(ss []backup.Snapshot) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func snaps(ns ...string) []backup.Snapshot {
	var out []backup.Snapshot
	for _, n := range ns {
		out = append(out, backup.Snapshot{Name: n})
	}
	return out
}

func TestPlanSync(t *testing.T) {
	for _, tc := range []struct {
		name          string
		local, remote []backup.Snapshot
		retain        int
		upload, prune []string
	}{
		{"an empty store gets the snapshots kept", snaps("a", "b"), nil, 7, []string{"a", "b"}, nil},
		{"nothing to do", snaps("a", "b"), snaps("a", "b"), 7, nil, nil},
		{"the new one goes up, the oldest of the store goes", snaps("b", "c"), snaps("a", "b"), 2, []string{"c"}, []string{"a"}},
		{"a failed upload is retried", snaps("a", "b", "c"), snaps("a"), 3, []string{"b", "c"}, nil},
		{"snapshots only the store has count too", snaps("c"), snaps("a", "b"), 2, []string{"c"}, []string{"a"}},
		{"a local snapshot older than the store's newest retain stays local", snaps("a"), snaps("b", "c"), 2, nil, nil},
		{"retain below 1 keeps one", snaps("a", "b"), nil, 0, []string{"b"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upload, prune := backup.PlanSync(tc.local, tc.remote, tc.retain)
			if !slices.Equal(names(upload), tc.upload) || !slices.Equal(names(prune), tc.prune) {
				t.Errorf("PlanSync = upload %v, prune %v; want %v, %v", names(upload), names(prune), tc.upload, tc.prune)
			}
		})
	}
}

func TestClusterPrefix(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{
		{"fke", "fke/team-a/demo/"},
		{"backups/fke", "backups/fke/team-a/demo/"},
		{"", "team-a/demo/"},
	} {
		if got := backup.ClusterPrefix(tc.prefix, "team-a", "demo"); got != tc.want {
			t.Errorf("ClusterPrefix(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	r := backup.Remote{Prefix: "fke/team-a/demo/"}
	if r.DataKey("20261201T120000Z") != "fke/team-a/demo/20261201T120000Z.db" || r.MetaKey("x") != "fke/team-a/demo/x.json" {
		t.Errorf("keys %s %s", r.DataKey("20261201T120000Z"), r.MetaKey("x"))
	}
}

// etcd serves one snapshot's data.
type etcd struct {
	data []byte
	rev  int64
}

func (e etcd) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{Revision: e.rev}}, nil
}

func (e etcd) Snapshot(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(e.data)), nil
}

// take makes snapshots in d at the given hours of a day.
func take(t *testing.T, d backup.Dir, hours ...int) {
	t.Helper()
	for _, h := range hours {
		data := bytes.Repeat([]byte{byte(h)}, 4096+h)
		if _, err := backup.Take(context.Background(), etcd{data: data, rev: int64(h)}, "e", d, time.Date(2026, 12, 1, h, 0, 0, 0, time.UTC), "uid-1"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSyncUploadsPrunesAndRetries(t *testing.T) {
	ctx := context.Background()
	d := backup.Dir(t.TempDir())
	store := &storetest.Memory{}
	r := backup.Remote{Store: store, Prefix: backup.ClusterPrefix("fke", "default", "demo")}
	take(t, d, 1, 2)

	res, err := backup.Sync(ctx, r, d, 2)
	if err != nil || len(res.Uploaded) != 2 || len(res.Remote) != 2 {
		t.Fatalf("first Sync = %+v, %v", res, err)
	}
	if store.Object("fke/default/demo/20261201T010000Z.db") == nil || store.Object("fke/default/demo/20261201T010000Z.json") == nil {
		t.Fatal("the snapshot's objects are not in the store")
	}

	// The store fails: nothing uploaded, the error says so.
	take(t, d, 3)
	store.Fail = errors.New("connection refused")
	if _, err := backup.Sync(ctx, r, d, 2); err == nil {
		t.Fatal("Sync against a failing store: no error")
	}
	// Back: the one missing goes up, the oldest in the store goes.
	store.Fail = nil
	res, err = backup.Sync(ctx, r, d, 2)
	if err != nil || !slices.Equal(res.Uploaded, []string{"20261201T030000Z"}) || !slices.Equal(res.Pruned, []string{"20261201T010000Z"}) {
		t.Fatalf("Sync after the failure = %+v, %v", res, err)
	}
	if got := names(res.Remote); !slices.Equal(got, []string{"20261201T020000Z", "20261201T030000Z"}) {
		t.Errorf("store holds %v", got)
	}
	// A local snapshot that fails its checksum is not uploaded, and does
	// not stop the others.
	take(t, d, 4, 5)
	data, _ := os.ReadFile(d.File("20261201T040000Z"))
	data[0] ^= 0xff
	if err := os.WriteFile(d.File("20261201T040000Z"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err = backup.Sync(ctx, r, d, 3)
	if err != nil || !slices.Equal(res.Uploaded, []string{"20261201T050000Z"}) || !slices.Equal(res.Corrupt, []string{"20261201T040000Z"}) {
		t.Fatalf("Sync with a corrupt local snapshot = %+v, %v", res, err)
	}
	if store.Object(r.DataKey("20261201T040000Z")) != nil {
		t.Error("a corrupt snapshot was uploaded")
	}
	listed, err := backup.ListRemote(ctx, r)
	if err != nil || !slices.Equal(names(listed), []string{"20261201T020000Z", "20261201T030000Z", "20261201T050000Z"}) || listed[0].SHA256 == "" {
		t.Errorf("ListRemote = %+v, %v", listed, err)
	}
	// A snapshot half uploaded (data without its checksum) is not listed.
	store.SetObject(r.DataKey("20261201T060000Z"), []byte("half"))
	if listed, _ := backup.ListRemote(ctx, r); len(listed) != 3 {
		t.Errorf("a half-uploaded snapshot is listed: %v", names(listed))
	}
}

func TestDownloadChecksTheChecksum(t *testing.T) {
	ctx := context.Background()
	src := backup.Dir(t.TempDir())
	take(t, src, 5)
	store := &storetest.Memory{}
	r := backup.Remote{Store: store, Prefix: "p/"}
	name := "20261201T050000Z"
	up, err := backup.Upload(ctx, r, src, name)
	if err != nil {
		t.Fatal(err)
	}

	dst := backup.Dir(t.TempDir())
	got, err := backup.Download(ctx, r, name, dst, up.SHA256)
	if err != nil || got.SHA256 != up.SHA256 {
		t.Fatalf("Download = %+v, %v", got, err)
	}
	if _, err := backup.Verify(dst, name); err != nil {
		t.Errorf("the downloaded copy: %v", err)
	}

	for _, tc := range []struct {
		name   string
		tamper func()
		want   string
	}{
		{"one byte changed", func() {
			data := bytes.Clone(store.Object(r.DataKey(name)))
			data[100] ^= 0xff
			store.SetObject(r.DataKey(name), data)
		}, ""},
		{"longer", func() { store.SetObject(r.DataKey(name), append(bytes.Clone(store.Object(r.DataKey(name))), 0)) }, ""},
		{"data and checksum replaced together", func() {
			data := []byte("other data")
			sum := sha256.Sum256(data)
			meta, _ := json.Marshal(backup.Snapshot{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
			store.SetObject(r.DataKey(name), data)
			store.SetObject(r.MetaKey(name), meta)
		}, up.SHA256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := backup.Upload(ctx, r, src, name); err != nil {
				t.Fatal(err)
			}
			tc.tamper()
			dst := backup.Dir(t.TempDir())
			if _, err := backup.Download(ctx, r, name, dst, tc.want); !errors.Is(err, backup.ErrChecksum) {
				t.Fatalf("Download of a tampered object: %v", err)
			}
			if left, _ := os.ReadDir(string(dst)); len(left) != 0 {
				t.Errorf("a refused download left %d files", len(left))
			}
		})
	}
	if _, err := backup.Download(ctx, r, "20000101T000000Z", backup.Dir(t.TempDir()), ""); !errors.Is(err, backup.ErrNotFound) {
		t.Errorf("Download of a snapshot the store lacks: %v", err)
	}
	if _, err := backup.Download(ctx, r, "../x", backup.Dir(t.TempDir()), ""); err == nil {
		t.Error("Download of a bad name: no error")
	}
}
