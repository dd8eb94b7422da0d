package backup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type fakeEtcd struct {
	data []byte
	rev  int64
	err  error
}

func (f fakeEtcd) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{Revision: f.rev}}, nil
}

func (f fakeEtcd) Snapshot(context.Context) (io.ReadCloser, error) {
	if f.err != nil {
		return nil, f.err
	}
	return io.NopCloser(bytes.NewReader(f.data)), nil
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestTakeListVerifyPrune(t *testing.T) {
	d := Dir(t.TempDir())
	for i := range 4 {
		s, err := Take(context.Background(), fakeEtcd{data: bytes.Repeat([]byte{byte(i)}, 1000+i), rev: int64(100 + i)}, "e", d, t0.Add(time.Duration(i)*time.Hour), "uid-1")
		if err != nil {
			t.Fatal(err)
		}
		if s.Size != int64(1000+i) || s.Revision != int64(100+i) || len(s.SHA256) != 64 {
			t.Fatalf("snapshot %+v", s)
		}
	}
	all, err := List(d)
	if err != nil || len(all) != 4 || all[0].Name != "20261201T120000Z" || all[3].Name != "20261201T150000Z" {
		t.Fatalf("List = %+v, %v", all, err)
	}
	if _, err := Verify(d, all[1].Name); err != nil {
		t.Fatalf("Verify of an intact snapshot: %v", err)
	}
	// One changed byte is refused.
	data, _ := os.ReadFile(d.File(all[2].Name))
	data[10] ^= 0xff
	if err := os.WriteFile(d.File(all[2].Name), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(d, all[2].Name); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Verify of a tampered snapshot: %v", err)
	}
	for _, bad := range []string{"", "../x", ".hidden", "nope"} {
		if _, err := Verify(d, bad); err == nil {
			t.Errorf("Verify(%q): no error", bad)
		}
	}
	kept, err := Prune(d, 2)
	if err != nil || len(kept) != 2 || kept[0].Name != all[2].Name {
		t.Fatalf("Prune = %+v, %v", kept, err)
	}
	if left, _ := List(d); len(left) != 2 {
		t.Fatalf("%d left after Prune", len(left))
	}
	if _, err := os.Stat(d.File(all[0].Name)); !os.IsNotExist(err) {
		t.Errorf("pruned file still there: %v", err)
	}
}

// TestTakeKeepsASnapshotOfTheSameName: a second snapshot in the same
// second is refused and the first stays as it was recorded.
func TestTakeKeepsASnapshotOfTheSameName(t *testing.T) {
	d := Dir(t.TempDir())
	first, err := Take(context.Background(), fakeEtcd{data: []byte("first"), rev: 1}, "e", d, t0, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Take(context.Background(), fakeEtcd{data: []byte("second"), rev: 2}, "e", d, t0.Add(900*time.Millisecond), "uid-1"); !errors.Is(err, ErrExists) {
		t.Fatalf("a second snapshot in the same second: %v, want ErrExists", err)
	}
	if got, err := Verify(d, first.Name); err != nil || got != first {
		t.Errorf("the first snapshot after the second was refused: %+v, %v; was %+v", got, err, first)
	}
}

func TestTakeFailureLeavesNothing(t *testing.T) {
	d := Dir(t.TempDir())
	if _, err := Take(context.Background(), fakeEtcd{err: errors.New("etcd down")}, "e", d, t0, "uid-1"); err == nil {
		t.Fatal("no error")
	}
	if all, _ := List(d); len(all) != 0 {
		t.Fatalf("a failed snapshot is listed: %+v", all)
	}
}

func TestSplit(t *testing.T) {
	s := func(names ...string) []Snapshot {
		var out []Snapshot
		for _, n := range names {
			out = append(out, Snapshot{Name: n})
		}
		return out
	}
	for _, tc := range []struct {
		in         []Snapshot
		retain     int
		drop, keep int
	}{{s("a", "b", "c"), 2, 1, 2}, {s("a"), 3, 0, 1}, {s("a", "b"), 0, 1, 1}, {nil, 1, 0, 0}} {
		drop, keep := Split(tc.in, tc.retain)
		if len(drop) != tc.drop || len(keep) != tc.keep {
			t.Errorf("Split(%d, %d) = %d, %d", len(tc.in), tc.retain, len(drop), len(keep))
		}
	}
}

func TestSchedule(t *testing.T) {
	for _, tc := range []struct {
		expr          string
		last, created time.Time
		want          time.Time
	}{
		{"0 3 * * *", time.Time{}, t0, time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)},
		{"0 3 * * *", time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC), t0, time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)},
		{"@hourly", t0.Add(10 * time.Minute), t0, t0.Add(time.Hour)},
		{"@every 6h", t0, t0, t0.Add(6 * time.Hour)},
	} {
		s, err := ParseSchedule(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if got := Due(s, tc.last, tc.created); !got.Equal(tc.want) {
			t.Errorf("%s after %s: %s, want %s", tc.expr, tc.last, got, tc.want)
		}
	}
	for _, bad := range []string{"", "every day", "61 * * * *", "* * * *"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q): no error", bad)
		}
	}
}
