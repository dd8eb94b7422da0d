package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/supervisor"
	"fke.dev/fke/test/testenv"
)

// TestKeyExportAndImport runs a real etcd: the keys of one API server
// prefix are exported at one revision (later writes are not in it) and
// imported under another prefix — as a hosted tenant's data moves between
// its own etcd and a prefix of the shared one — from the export and from
// an etcd snapshot of the same etcd; a partial earlier import is replaced,
// keys outside the prefix are left alone, and leased keys get a lease.
func TestKeyExportAndImport(t *testing.T) {
	bin := filepath.Join(testenv.BinDir(t), "etcd")
	ports, err := supervisor.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cmd := exec.Command(bin, "--data-dir="+filepath.Join(t.TempDir(), "etcd"), "--name=t",
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=t="+peer)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for {
		if _, err := cli.Status(ctx, client); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("etcd did not start")
		case <-time.After(100 * time.Millisecond):
		}
	}
	put := func(key, value string, opts ...clientv3.OpOption) {
		t.Helper()
		if _, err := cli.Put(ctx, key, value, opts...); err != nil {
			t.Fatal(err)
		}
	}
	// More keys than one page of the export, a large value, a leased key,
	// keys beside the prefix that are not in it.
	want := map[string]string{}
	for i := range 1200 {
		k := fmt.Sprintf("/registry/configmaps/default/cm-%04d", i)
		want[k] = fmt.Sprintf("value %d", i)
		put(k, want[k])
	}
	big := string(make([]byte, 900<<10))
	want["/registry/secrets/default/big"] = big
	put("/registry/secrets/default/big", big)
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	want["/registry/events/default/e1"] = "event"
	put("/registry/events/default/e1", "event", clientv3.WithLease(lease.ID))
	put("/registry-other/x", "not under the prefix")
	put("compact_rev_key", "outside")
	put("/registry/configmaps/default/deleted", "gone before the export")
	if _, err := cli.Delete(ctx, "/registry/configmaps/default/deleted"); err != nil {
		t.Fatal(err)
	}

	dir := backup.Dir(t.TempDir())
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	export, err := backup.TakeKeys(ctx, cli, "/registry", dir, now, "uid-1")
	if err != nil {
		t.Fatalf("TakeKeys: %v", err)
	}
	put("/registry/configmaps/default/after", "written after the export")
	if export.Format != backup.FormatKeys || export.ClusterUID != "uid-1" || export.Revision == 0 {
		t.Fatalf("export = %+v", export)
	}
	if _, err := backup.Verify(dir, export.Name); err != nil {
		t.Fatalf("the export fails its checksum: %v", err)
	}
	snap, err := backup.Take(ctx, cli, client, dir, now.Add(time.Second), "uid-1")
	if err != nil {
		t.Fatal(err)
	}

	check := func(prefix string) {
		t.Helper()
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range resp.Kvs {
			k := "/registry" + string(kv.Key)[len(prefix):]
			got[k] = string(kv.Value)
			if k == "/registry/events/default/e1" {
				ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
				if err != nil || kv.Lease == 0 || ttl.TTL <= 0 || ttl.TTL > 600 {
					t.Errorf("%s: the leased key has lease %x (ttl %v, %v), want one of at most 600 s", prefix, kv.Lease, ttl, err)
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s holds %d keys, want %d", prefix, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s is %d bytes, want %d", prefix, k, len(got[k]), len(v))
			}
		}
	}

	// From the export, over a partial earlier import.
	put("/fke/t1/configmaps/default/cm-0000", "left by an import cut short")
	put("/fke/t1/configmaps/default/stray", "not in the snapshot")
	n, err := backup.ImportKeys(ctx, cli, dir.File(export.Name), "/fke/t1")
	if err != nil {
		t.Fatalf("ImportKeys from the export: %v", err)
	}
	if n != len(want) {
		t.Errorf("imported %d keys from the export, want %d", n, len(want))
	}
	check("/fke/t1")
	// From an etcd snapshot of the whole etcd (a local cluster's backup):
	// its API server prefix only; the key written after the export is in it.
	want["/registry/configmaps/default/after"] = "written after the export"
	if _, err := backup.ImportKeys(ctx, cli, dir.File(snap.Name), "/fke/t2"); err != nil {
		t.Fatalf("ImportKeys from an etcd snapshot: %v", err)
	}
	check("/fke/t2")
	for _, k := range []string{"/registry-other/x", "compact_rev_key"} {
		if resp, err := cli.Get(ctx, k); err != nil || len(resp.Kvs) != 1 {
			t.Errorf("%s outside the prefixes: %v, %v", k, resp, err)
		}
	}
	if _, err := backup.ImportKeys(ctx, cli, filepath.Join(string(dir), "missing.db"), "/fke/t3"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("importing a missing file: %v", err)
	}
}
