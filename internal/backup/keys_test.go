package backup

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestRecordRoundTrip(t *testing.T) {
	recs := []record{
		{key: []byte("/pods/default/a"), value: []byte("k8s\x00binary"), lease: 0, ttl: 0},
		{key: []byte("/events/default/e1"), value: bytes.Repeat([]byte("x"), 70000), lease: 7587880000000001234, ttl: 3599},
		{key: []byte("/masterleases/10.0.0.1"), value: nil, lease: -1, ttl: 15},
	}
	var buf bytes.Buffer
	for _, r := range recs {
		if err := writeRecord(&buf, r); err != nil {
			t.Fatal(err)
		}
	}
	whole := buf.Bytes()
	r := bufio.NewReader(bytes.NewReader(whole))
	for i, want := range recs {
		got, err := readRecord(r)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !bytes.Equal(got.key, want.key) || !bytes.Equal(got.value, want.value) || got.lease != want.lease || got.ttl != want.ttl {
			t.Fatalf("record %d: got %q (%d bytes) lease %d ttl %d, want %q lease %d ttl %d", i, got.key, len(got.value), got.lease, got.ttl, want.key, want.lease, want.ttl)
		}
	}
	if _, err := readRecord(r); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last record: %v, want io.EOF", err)
	}
	// A file cut inside a record is an error, not a shorter export.
	for _, cut := range []int{3, len(whole) - 1} {
		r := bufio.NewReader(bytes.NewReader(whole[:cut]))
		var err error
		for err == nil {
			_, err = readRecord(r)
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d bytes: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestIsKeysAndReadKeys(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "a.db")
	var buf bytes.Buffer
	buf.WriteString(keysMagic)
	if err := writeRecord(&buf, record{key: []byte("/a"), value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "b.db")
	if err := os.WriteFile(other, []byte("not a key export"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{keys: true, other: false} {
		got, err := IsKeys(path)
		if err != nil || got != want {
			t.Errorf("IsKeys(%s) = %v, %v; want %v", filepath.Base(path), got, err, want)
		}
	}
	recs, err := readKeys(keys)
	if err != nil || len(recs) != 1 || string(recs[0].key) != "/a" {
		t.Fatalf("readKeys = %v, %v", recs, err)
	}
	// An absolute key would escape the prefix it is imported under.
	buf.Reset()
	buf.WriteString(keysMagic)
	if err := writeRecord(&buf, record{key: []byte("registry/x"), value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readKeys(keys); err == nil {
		t.Fatal("readKeys took a key that does not start with /")
	}
}

func TestCheckPrefix(t *testing.T) {
	for prefix, ok := range map[string]bool{"/registry": true, "/fke/t-1": true, "registry": false, "/registry/": false, "": false} {
		if err := checkPrefix(prefix); (err == nil) != ok {
			t.Errorf("checkPrefix(%q) = %v", prefix, err)
		}
	}
}

func TestLeaseFields(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 42)
	b = protowire.AppendTag(b, 9, protowire.BytesType) // a field it does not know
	b = protowire.AppendBytes(b, []byte("skip"))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 3600)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 1200)
	id, ttl, remaining := leaseFields(b)
	if id != 42 || ttl != 3600 || remaining != 1200 {
		t.Fatalf("leaseFields = %d, %d, %d; want 42, 3600, 1200", id, ttl, remaining)
	}
}

func TestLeaseMinute(t *testing.T) {
	for ttl, want := range map[int64]int64{1: 60, 60: 60, 61: 120, 3599: 3600, 0: 3600, -5: 3600} {
		if got := leaseMinute(ttl); got != want {
			t.Errorf("leaseMinute(%d) = %d, want %d", ttl, got, want)
		}
	}
}
