package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// GitRepo is a git repository with a work tree, made for a test, that a
// Release reads through its file:// URL.
type GitRepo struct {
	Dir  string
	repo *git.Repository
}

// NewGitRepo makes an empty repository whose first branch is main.
func NewGitRepo(t testing.TB) *GitRepo {
	t.Helper()
	dir := t.TempDir()
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	return &GitRepo{Dir: dir, repo: repo}
}

// URL is the repository's file:// URL.
func (g *GitRepo) URL() string { return "file://" + g.Dir }

// Commit writes files (path → content), removes the paths in remove, and
// commits on main; it returns the commit's hash.
func (g *GitRepo) Commit(t testing.TB, msg string, files map[string]string, remove ...string) string {
	t.Helper()
	wt, err := g.repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(g.Dir, name)
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
	for _, name := range remove {
		if _, err := wt.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	h, err := wt.Commit(msg, &git.CommitOptions{AllowEmptyCommits: true, Author: &object.Signature{Name: "fke test", Email: "test@fke.dev", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}
