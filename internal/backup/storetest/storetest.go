// Package storetest holds the contract every backup.Store keeps, as one
// test suite that each implementation runs, and an in-memory Store for
// unit tests.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"fke.dev/fke/internal/backup"
)

// Run checks s against the contract of backup.Store. s must start empty
// (under the keys the suite uses: "storetest/...").
func Run(t *testing.T, s backup.Store) {
	ctx := context.Background()
	put := func(t *testing.T, key, data string) {
		t.Helper()
		if err := s.Put(ctx, key, strings.NewReader(data), int64(len(data))); err != nil {
			t.Fatalf("Put(%s): %v", key, err)
		}
	}
	get := func(t *testing.T, key string) (string, error) {
		t.Helper()
		rc, err := s.Get(ctx, key)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		return string(data), err
	}
	list := func(t *testing.T, prefix string) []string {
		t.Helper()
		keys, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%s): %v", prefix, err)
		}
		sort.Strings(keys)
		return keys
	}

	t.Run("Put then Get returns the data; Put again replaces it", func(t *testing.T) {
		put(t, "storetest/a/one.db", "first")
		if got, err := get(t, "storetest/a/one.db"); err != nil || got != "first" {
			t.Fatalf("Get = %q, %v", got, err)
		}
		put(t, "storetest/a/one.db", "second, longer")
		if got, err := get(t, "storetest/a/one.db"); err != nil || got != "second, longer" {
			t.Fatalf("Get after a second Put = %q, %v", got, err)
		}
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		if err := s.Put(ctx, "storetest/a/big.db", bytes.NewReader(big), int64(len(big))); err != nil {
			t.Fatal(err)
		}
		if got, err := get(t, "storetest/a/big.db"); err != nil || got != string(big) {
			t.Fatalf("Get of 1 MiB: %d bytes, %v", len(got), err)
		}
	})
	t.Run("Get of a missing key is ErrNotFound", func(t *testing.T) {
		if _, err := get(t, "storetest/none"); !errors.Is(err, backup.ErrNotFound) {
			t.Fatalf("Get of a missing key: %v", err)
		}
	})
	t.Run("List returns the keys under a prefix, all of them", func(t *testing.T) {
		put(t, "storetest/b/x.json", "{}")
		put(t, "storetest/b/sub/y.db", "y")
		put(t, "storetest/bb/z.db", "z")
		if got, want := list(t, "storetest/b/"), []string{"storetest/b/sub/y.db", "storetest/b/x.json"}; !slices.Equal(got, want) {
			t.Errorf("List(storetest/b/) = %v, want %v", got, want)
		}
		if got := list(t, "storetest/nothing/"); len(got) != 0 {
			t.Errorf("List of an empty prefix = %v", got)
		}
		// More keys than one page of S3's ListObjectsV2 (1,000).
		const many = 1001
		for i := range many {
			put(t, fmt.Sprintf("storetest/many/%04d", i), "x")
		}
		if got := list(t, "storetest/many/"); len(got) != many {
			t.Errorf("List of %d keys: %d", many, len(got))
		}
	})
	t.Run("Delete removes; deleting a missing key is no error", func(t *testing.T) {
		put(t, "storetest/c/gone.db", "data")
		if err := s.Delete(ctx, "storetest/c/gone.db"); err != nil {
			t.Fatal(err)
		}
		if _, err := get(t, "storetest/c/gone.db"); !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("Get after Delete: %v", err)
		}
		if got := list(t, "storetest/c/"); len(got) != 0 {
			t.Errorf("List after Delete = %v", got)
		}
		if err := s.Delete(ctx, "storetest/c/never"); err != nil {
			t.Errorf("Delete of a missing key: %v", err)
		}
	})
	if s.String() == "" {
		t.Error("String() is empty")
	}
}

// Memory is a backup.Store in memory, for unit tests. Fail, when set,
// makes every call fail with it.
type Memory struct {
	mu      sync.Mutex
	objects map[string][]byte
	Fail    error
}

var _ backup.Store = (*Memory)(nil)

// Put implements backup.Store.
func (m *Memory) Put(_ context.Context, key string, r io.Reader, size int64) error {
	if err := m.fail(); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(data)) != size {
		return fmt.Errorf("put %s: %d bytes read, %d announced", key, len(data), size)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objects == nil {
		m.objects = map[string][]byte{}
	}
	m.objects[key] = data
	return nil
}

// Get implements backup.Store.
func (m *Memory) Get(_ context.Context, key string) (io.ReadCloser, error) {
	if err := m.fail(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objects[key]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, backup.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// List implements backup.Store.
func (m *Memory) List(_ context.Context, prefix string) ([]string, error) {
	if err := m.fail(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range maps.Keys(m.objects) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Delete implements backup.Store.
func (m *Memory) Delete(_ context.Context, key string) error {
	if err := m.fail(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	return nil
}

// String implements backup.Store.
func (m *Memory) String() string { return "memory" }

// Object returns the data of key, for tests to look at (nil when absent).
func (m *Memory) Object(key string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objects[key]
}

// SetObject replaces the data of key, as someone with write access to the
// bucket would.
func (m *Memory) SetObject(key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objects == nil {
		m.objects = map[string][]byte{}
	}
	m.objects[key] = data
}

func (m *Memory) fail() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Fail
}
