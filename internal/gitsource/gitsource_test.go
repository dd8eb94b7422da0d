package gitsource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// commitFiles writes files into the work tree of repo and commits them.
func commitFiles(t *testing.T, repo *git.Repository, dir string, files map[string]string, msg string) string {
	t.Helper()
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			t.Fatal(err)
		}
	}
	h, err := wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.com", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func TestFetchResolveExport(t *testing.T) {
	origin := t.TempDir()
	repo, err := git.PlainInitWithOptions(origin, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	first := commitFiles(t, repo, origin, map[string]string{"app/cm.yaml": "kind: ConfigMap\n", "README": "x"}, "first\n\nbody")
	if _, err := repo.CreateTag("v1", plumbing.NewHash(first), nil); err != nil {
		t.Fatal(err)
	}
	second := commitFiles(t, repo, origin, map[string]string{"app/cm.yaml": "kind: ConfigMap # 2\n"}, "second")

	ctx := context.Background()
	r := Repo{URL: "file://" + origin, Dir: filepath.Join(t.TempDir(), "cache")}
	if err := r.Fetch(ctx); err != nil {
		t.Fatalf("first fetch: %v", err)
	}
	for rev, want := range map[string]string{"main": second, "v1": first, first: first, first[:10]: first} {
		c, err := r.Resolve(rev)
		if err != nil || c.Hash != want {
			t.Errorf("Resolve(%s) = %v, %v; want %s", rev, c, err, want)
		}
	}
	if c, _ := r.Resolve("v1"); c.Subject != "first" {
		t.Errorf("subject %q, want first", c.Subject)
	}
	if _, err := r.Resolve("nope"); !errors.Is(err, ErrRevisionNotFound) {
		t.Errorf("Resolve(nope) = %v, want ErrRevisionNotFound", err)
	}

	third := commitFiles(t, repo, origin, map[string]string{"app/more.yaml": "kind: Secret\n"}, "third")
	if err := r.Fetch(ctx); err != nil {
		t.Fatalf("second fetch: %v", err)
	}
	if c, _ := r.Resolve("main"); c.Hash != third {
		t.Errorf("main after fetch = %s, want %s", c.Hash, third)
	}
	dst := filepath.Join(t.TempDir(), "x")
	if err := r.Export(first, dst); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dst, "app/cm.yaml"))
	if err != nil || string(data) != "kind: ConfigMap\n" {
		t.Errorf("exported %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "app/more.yaml")); !os.IsNotExist(err) {
		t.Errorf("a file of a later commit was exported: %v", err)
	}
}

func TestFetchErrors(t *testing.T) {
	ctx := context.Background()
	missing := Repo{URL: "file://" + filepath.Join(t.TempDir(), "none"), Dir: filepath.Join(t.TempDir(), "c")}
	if err := missing.Fetch(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("missing repository: %v, want ErrUnreachable", err)
	}
	refused := Repo{URL: "https://127.0.0.1:1/app.git", Dir: filepath.Join(t.TempDir(), "c"), Creds: Credentials{Token: "x"}}
	if err := refused.Fetch(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("closed port: %v, want ErrUnreachable", err)
	}
	noKey := Repo{URL: "ssh://git@127.0.0.1:1/app.git", Dir: filepath.Join(t.TempDir(), "c")}
	if err := noKey.Fetch(ctx); !errors.Is(err, ErrAuth) {
		t.Errorf("ssh without a key: %v, want ErrAuth", err)
	}
}
