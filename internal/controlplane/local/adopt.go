package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"fke.dev/fke/internal/supervisor"
)

// standbyNice is the niceness of a standby plane's processes: they use the
// CPU that running clusters leave.
const standbyNice = 10

// Adopt implements controlplane.Runtime. The data directory of from moves to
// to's in one step (a rename that leaves, where from was, a link to its new
// place), so processes that run with from's paths keep finding their files;
// they run on under their old process names until they are next started.
func (r *Runtime) Adopt(ctx context.Context, from, to string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.running[to]; ok {
		if _, both := r.running[from]; both {
			return fmt.Errorf("adopting control plane %s as %s: %s already runs a control plane", from, to, to)
		}
		return nil // adopted before
	}
	if err := moveDataDir(r.DataDir(from), r.DataDir(to)); err != nil {
		return fmt.Errorf("adopting control plane %s as %s: %w", from, to, err)
	}
	if spec, ok := r.running[from]; ok {
		spec.Key, spec.Standby = to, false
		r.running[to] = spec
		r.procs[to] = r.procs[from]
		r.addons[to] = r.addons[from]
		delete(r.running, from)
		delete(r.procs, from)
		delete(r.addons, from)
	}
	var errs []error
	for _, p := range r.procs[to] {
		if proc := r.group.Get(p.name); proc != nil {
			errs = append(errs, proc.SetNice(0))
		}
	}
	r.log.Info("adopted a standby control plane", "from", from, "cluster", to)
	return errors.Join(errs...)
}

// moveDataDir moves the directory from to the path to (which must not hold
// one) and leaves at from a symbolic link to to. Where the file system can,
// both happen at once (RENAME_EXCHANGE with a link made at to first); else
// the link follows the rename. Done when to is a directory and from a link
// or absent.
func moveDataDir(from, to string) error {
	if fi, err := os.Lstat(to); err == nil && fi.IsDir() {
		if fi, err := os.Lstat(from); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		return fmt.Errorf("%s already exists", to)
	}
	fi, err := os.Lstat(from)
	if err != nil {
		return fmt.Errorf("data of the standby plane: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data of the standby plane: %s is not a directory", from)
	}
	abs, err := filepath.Abs(to)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return err
	}
	_ = os.Remove(to) // a link left by an interrupted move
	if err := os.Symlink(abs, to); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_EXCHANGE); err == nil {
		return nil
	}
	if err := os.Remove(to); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return os.Symlink(abs, from)
}

// ForgetAliases removes the links Adopt left at standby planes' old places
// that no process opens files by any more. A link stays while a process
// of the plane that adopted it, started before Adopt (in this process or
// in an earlier fke-manager whose processes a process holder kept, and
// which this runtime took over), runs with the old paths, and while this
// runtime has not ensured the adopting plane since it started: an earlier
// fke-manager's processes may still run with them, waiting to be taken
// over. It reports the links it removed.
func (r *Runtime) ForgetAliases(dir string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(r.dir, filepath.FromSlash(dir)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		from := dir + "/" + e.Name()
		if r.aliasInUse(from) {
			continue
		}
		if err := os.Remove(r.DataDir(from)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, from)
	}
	return removed, nil
}

// aliasInUse reports whether processes may open files through the link
// Adopt left at from (see ForgetAliases); r.mu is held.
func (r *Runtime) aliasInUse(from string) bool {
	to, ok := r.adopter(from)
	if !ok {
		return false
	}
	if _, err := os.Stat(r.DataDir(to)); err != nil {
		return false // deleted: nothing of it runs
	}
	if _, ok := r.running[to]; !ok {
		return true // not taken over by this runtime yet
	}
	return r.usesOldPaths(from, to)
}

// adopter returns the key whose data the link at from names (the plane
// that adopted from); false when the link names nothing under this
// runtime's directory.
func (r *Runtime) adopter(from string) (string, bool) {
	target, err := os.Readlink(r.DataDir(from))
	if err != nil {
		return "", false
	}
	base, err := filepath.Abs(r.dir)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(base, target)
	if err != nil || !filepath.IsLocal(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// usesOldPaths reports whether a process of to (a component or an addon)
// still runs with from's paths, started before Adopt; r.mu is held.
func (r *Runtime) usesOldPaths(from, to string) bool {
	old := r.DataDir(from)
	var names []string
	for _, p := range r.procs[to] {
		names = append(names, p.name)
	}
	for name := range r.addons[to] {
		names = append(names, addonProcessName(to, name))
	}
	for _, name := range names {
		// Running, starting or waiting to restart: it may open files by
		// its old paths (a restart starts it with to's).
		if proc := r.group.Get(name); proc != nil && proc.State() != supervisor.Stopped && proc.State() != supervisor.Failed && proc.Root() == old {
			return true
		}
	}
	return false
}

// Keys returns the keys under dir (a first path element, such as
// ".standby") that hold data: directories, not the links Adopt leaves.
func (r *Runtime) Keys(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(r.dir, filepath.FromSlash(dir)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		if e.IsDir() {
			keys = append(keys, dir+"/"+e.Name())
		}
	}
	return keys, nil
}

// adoptedAway reports whether the data of key moved to another key (a
// standby plane that was adopted): its place holds a link.
func (r *Runtime) adoptedAway(key string) bool {
	fi, err := os.Lstat(r.DataDir(key))
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}
