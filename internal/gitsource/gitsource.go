// Package gitsource fetches a git repository into a local cache and
// exports the files of one commit, for a Release to render. It speaks
// https (with a token), ssh (with a key and known hosts) and file:// —
// served in process by go-git, so no git binary is needed.
package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"fke.dev/fke/internal/confine"
)

func init() {
	// go-git's file transport runs git-upload-pack; its in-process server
	// reads the repository itself.
	client.InstallProtocol("file", server.NewServer(localLoader{}))
}

// localLoader opens the repository of a file:// URL: a bare one, or the
// .git directory of one with a work tree (go-git's filesystem loader reads
// the work tree's root as if it were the git directory).
type localLoader struct{}

func (localLoader) Load(ep *transport.Endpoint) (storer.Storer, error) {
	dir := ep.Path
	if st, err := os.Stat(filepath.Join(dir, git.GitDirName)); err == nil && st.IsDir() {
		dir = filepath.Join(dir, git.GitDirName)
	} else if _, err := os.Stat(filepath.Join(dir, "config")); err != nil {
		return nil, transport.ErrRepositoryNotFound
	}
	return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault()), nil
}

// Credentials of a repository; the zero value is none.
type Credentials struct {
	// Username and Token for https (Username defaults to "git").
	Username, Token string
	// Identity is an ssh private key (PEM) and KnownHosts the host keys
	// it may talk to (known_hosts format); both are needed for ssh.
	Identity, KnownHosts []byte
	// CABundle, when set, are the PEM certificates an https server's
	// certificate must chain to (a private git server); else the system's.
	CABundle []byte
}

// Typed errors; errors.Is tells them apart.
var (
	// ErrUnreachable: the repository could not be read (no such host,
	// connection refused, no repository at that URL).
	ErrUnreachable = errors.New("repository unreachable")
	// ErrAuth: the repository refused the credentials, or needs some.
	ErrAuth = errors.New("repository refused the credentials")
	// ErrRevisionNotFound: no branch, tag or commit has that name.
	ErrRevisionNotFound = errors.New("revision not found")
	// ErrOutsideTree: a commit's tree holds a path that would be written
	// out of the export (a file below a link that leaves it).
	ErrOutsideTree = errors.New("path leaves the repository")
)

// Repo is a cached clone of one repository in Dir.
type Repo struct {
	URL   string
	Dir   string
	Creds Credentials
}

// Fetch brings the cache up to date with the remote's branches and tags,
// cloning it the first time. Safe to call again; not safe to call
// concurrently for one Dir.
func (r Repo) Fetch(ctx context.Context) error {
	auth, err := r.auth()
	if err != nil {
		return err
	}
	repo, err := git.PlainOpen(r.Dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if repo, err = r.init(); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("opening the cache of %s: %w", r.URL, err)
	}
	err = repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"},
		Auth:       auth,
		CABundle:   r.Creds.CABundle,
		Force:      true,
		Prune:      true,
	})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return classify(r.URL, err)
}

func (r Repo) init() (*git.Repository, error) {
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the cache of %s: %w", r.URL, err)
	}
	repo, err := git.PlainInit(r.Dir, true)
	if err != nil {
		return nil, fmt.Errorf("making the cache of %s: %w", r.URL, err)
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.URL}}); err != nil {
		return nil, fmt.Errorf("making the cache of %s: %w", r.URL, err)
	}
	return repo, nil
}

// classify wraps a fetch error in ErrAuth or ErrUnreachable.
func classify(url string, err error) error {
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(err.Error(), "unable to authenticate"), strings.Contains(err.Error(), "knownhosts"):
		return fmt.Errorf("%w: %s: %v", ErrAuth, url, err)
	case errors.Is(err, transport.ErrRepositoryNotFound), errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, url, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrUnreachable, url, err)
}

func (r Repo) auth() (transport.AuthMethod, error) {
	c := r.Creds
	switch {
	case strings.HasPrefix(r.URL, "https://") && c.Token != "":
		user := c.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: c.Token}, nil
	case strings.HasPrefix(r.URL, "ssh://"):
		if len(c.Identity) == 0 || len(c.KnownHosts) == 0 {
			return nil, fmt.Errorf("%w: %s: an ssh repository needs a Secret with the keys identity and known_hosts", ErrAuth, r.URL)
		}
		user := "git"
		if ep, err := transport.NewEndpoint(r.URL); err == nil && ep.User != "" {
			user = ep.User
		}
		keys, err := gitssh.NewPublicKeys(user, c.Identity, "")
		if err != nil {
			return nil, fmt.Errorf("%w: %s: reading the ssh key: %v", ErrAuth, r.URL, err)
		}
		hosts := filepath.Join(r.Dir+".ssh", "known_hosts")
		if err := os.MkdirAll(filepath.Dir(hosts), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(hosts, c.KnownHosts, 0o600); err != nil {
			return nil, err
		}
		cb, err := gitssh.NewKnownHostsCallback(hosts)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: reading known_hosts: %v", ErrAuth, r.URL, err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, nil
}

// Commit is a resolved revision.
type Commit struct {
	Hash string
	// Subject is the first line of the commit message.
	Subject string
}

// Resolve returns the commit that revision names in the cache: a branch,
// then a tag, then a commit hash (full or abbreviated to 7+ characters).
func (r Repo) Resolve(revision string) (Commit, error) {
	repo, err := git.PlainOpen(r.Dir)
	if err != nil {
		return Commit{}, fmt.Errorf("opening the cache of %s: %w", r.URL, err)
	}
	for _, name := range []plumbing.ReferenceName{plumbing.NewRemoteReferenceName("origin", revision), plumbing.NewTagReferenceName(revision)} {
		if h, err := repo.ResolveRevision(plumbing.Revision(name)); err == nil {
			return commitOf(repo, *h)
		}
	}
	if len(revision) >= 7 && isHex(revision) {
		if h, err := repo.ResolveRevision(plumbing.Revision(revision)); err == nil {
			return commitOf(repo, *h)
		}
	}
	return Commit{}, fmt.Errorf("%w: %s has no branch, tag or commit %q", ErrRevisionNotFound, r.URL, revision)
}

func commitOf(repo *git.Repository, h plumbing.Hash) (Commit, error) {
	c, err := repo.CommitObject(h)
	if err != nil {
		return Commit{}, fmt.Errorf("reading commit %s: %w", h, err)
	}
	subject, _, _ := strings.Cut(c.Message, "\n")
	return Commit{Hash: h.String(), Subject: subject}, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// Export writes the files of commit hash into dst (which must not exist),
// keeping their modes' executable bit; symbolic links are written as links
// that stay inside dst, others are refused.
func (r Repo) Export(hash, dst string) error {
	repo, err := git.PlainOpen(r.Dir)
	if err != nil {
		return fmt.Errorf("opening the cache of %s: %w", r.URL, err)
	}
	c, err := repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return fmt.Errorf("%w: commit %s: %v", ErrRevisionNotFound, hash, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return fmt.Errorf("reading the tree of %s: %w", hash, err)
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	// Everything is written through the export's root: a file whose path
	// runs through one of the commit's links cannot land outside it.
	// Links are written as the commit has them, whatever their target;
	// whoever reads the export opens it with os.Root too, and a link that
	// leaves it is refused when something reads it.
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	return tree.Files().ForEach(func(f *object.File) error { return writeFile(root, f) })
}

func writeFile(root *os.Root, f *object.File) error {
	name := filepath.FromSlash(f.Name)
	if !filepath.IsLocal(name) {
		return fmt.Errorf("%w: %q", ErrOutsideTree, f.Name)
	}
	if err := root.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return outside(f.Name, err)
	}
	if f.Mode == filemode.Symlink {
		target, err := f.Contents()
		if err != nil {
			return fmt.Errorf("reading link %s: %w", f.Name, err)
		}
		return outside(f.Name, root.Symlink(target, name))
	}
	mode := os.FileMode(0o600)
	if fm, err := f.Mode.ToOSFileMode(); err == nil && fm&0o100 != 0 {
		mode = 0o700
	}
	rd, err := f.Reader()
	if err != nil {
		return fmt.Errorf("reading %s: %w", f.Name, err)
	}
	defer rd.Close()
	out, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return outside(f.Name, err)
	}
	if _, err := io.Copy(out, rd); err != nil {
		out.Close()
		return fmt.Errorf("writing %s: %w", f.Name, err)
	}
	return out.Close()
}

// outside wraps os.Root's refusal of a path that leaves the export in
// ErrOutsideTree.
func outside(name string, err error) error {
	if confine.Escapes(err) {
		return fmt.Errorf("%w: %q runs through a link out of the repository", ErrOutsideTree, name)
	}
	return err
}
