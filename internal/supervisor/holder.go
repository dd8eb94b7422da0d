package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Holder starts children on behalf of a supervisor in another process
// (its client, a Group with HoldIn) and keeps them when that process dies:
// fke's daemon holds the tenant control planes fke-manager runs, so a
// crashed manager takes no tenant API server down with it. The children
// are the holder's own (killed by the kernel when the holder dies, like any
// supervisor's), and the client watches them through pidfds: it restarts
// and stops them as its own.
//
// Adoption: each client process is a session. A start request of a new
// session first looks at the children earlier sessions left in the same
// slot (Spec.Slot): one with the same command (binary, arguments,
// environment, directory, log) is handed over instead of starting another;
// the others are stopped before the new child starts. Paths below a
// launch's Root (Spec.Root) count from it, and two Roots are the same when
// they are one directory, links resolved when the new session asks: a
// standby plane adopted by a cluster (its directory moved, a link left at
// its old place) runs the cluster's command. Children that no
// session claims within AdoptWindow of a new session's first request are
// stopped (a cluster deleted while no manager ran); a client stops sooner
// those it will not claim, by the directory they log into (a cluster
// deleted before the new manager took its processes over).
type Holder struct {
	log *slog.Logger
	// AdoptWindow: see the type's comment. NewHolder sets 2 minutes.
	AdoptWindow time.Duration

	mu      sync.Mutex
	held    map[int]*heldProc // by pid
	session string            // the newest client's
	collect *time.Timer
}

type heldProc struct {
	launch
	fingerprint string
	pid         int
	startTime   string // /proc/PID/stat field 22: tells a reused pid apart
	session     string // the client that owns it; empty while being stopped
	done        chan struct{}
}

// NewHolder returns a Holder that logs to log (nil discards).
func NewHolder(log *slog.Logger) *Holder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{log: log, AdoptWindow: 2 * time.Minute, held: map[int]*heldProc{}}
}

// startRequest is what a client sends; startAnswer what it gets.
type startRequest struct {
	Session string `json:"session"`
	Launch  launch `json:"launch"`
}

type startAnswer struct {
	PID       int    `json:"pid"`
	StartTime string `json:"startTime"`
	Adopted   bool   `json:"adopted"`
	// Root is the Root the adopted child was started with (see Spec.Root).
	Root string `json:"root,omitempty"`
}

const holderStartPath = "/v1/start"

// stopLeftRequest asks the holder to stop the children that earlier
// sessions left and whose log file lies in Dir.
type stopLeftRequest struct {
	Session string `json:"session"`
	Dir     string `json:"dir"`
}

const holderStopLeftPath = "/v1/stop-left"

// maxSocketPath is the longest path a Unix socket may bind (sun_path, less
// its terminating zero).
const maxSocketPath = 107

// ListenHolder makes the Unix socket socket (0600, in a directory only
// this user may enter) for Serve.
func ListenHolder(socket string) (net.Listener, error) {
	if len(socket) > maxSocketPath {
		return nil, fmt.Errorf("process holder: the socket path %s is longer than %d bytes, the most a Unix socket may have", socket, maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("process holder: %w", err)
	}
	if err := os.Chmod(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("process holder: %w", err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("process holder: removing an old socket: %w", err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("process holder: %w", err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("process holder: %w", err)
	}
	return ln, nil
}

// Serve answers clients on ln (see ListenHolder) until ctx ends, and closes it.
// It does not stop the children: see StopAll.
func (h *Holder) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+holderStartPath, h.serveStart)
	mux.HandleFunc("POST "+holderStopLeftPath, h.serveStopLeft)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("process holder: %w", err)
	}
	return nil
}

// decode reads r's JSON body into v, or answers 400 and returns false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil {
		http.Error(w, "decoding the request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (h *Holder) serveStart(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	if !decode(w, r, &req) {
		return
	}
	ans, err := h.start(r.Context(), req.Session, req.Launch)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(ans); err != nil {
		h.log.Warn("answering a start request failed", "name", req.Launch.Name, "error", err)
	}
}

func (h *Holder) serveStopLeft(w http.ResponseWriter, r *http.Request) {
	var req stopLeftRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Session == "" || !filepath.IsAbs(req.Dir) {
		http.Error(w, "a stop request needs a session and an absolute directory", http.StatusBadRequest)
		return
	}
	h.stopLeft(r.Context(), req.Session, req.Dir)
	w.WriteHeader(http.StatusNoContent)
}

// stopLeft stops the children that sessions before session left and whose
// log file lies in dir (links resolved on both sides), and waits until
// they are gone.
func (h *Holder) stopLeft(ctx context.Context, session, dir string) {
	dir = resolved(dir)
	h.mu.Lock()
	h.noteSessionLocked(session)
	var left []*heldProc
	for _, hp := range h.held {
		if hp.session == session || hp.session == "" || hp.LogPath == "" || !within(resolved(filepath.Dir(hp.LogPath)), dir) {
			continue
		}
		hp.session = ""
		left = append(left, hp)
	}
	h.mu.Unlock()
	for _, hp := range left {
		h.log.Info("stopping a process left in a directory its supervisor let go", "pid", hp.pid, "name", hp.Name, "dir", dir)
	}
	h.stopEach(ctx, left)
}

// stopEach stops procs at once and waits until they are gone.
func (h *Holder) stopEach(ctx context.Context, procs []*heldProc) {
	var wg sync.WaitGroup
	for _, hp := range procs {
		wg.Go(func() { hp.stop(ctx, h.log) })
	}
	wg.Wait()
}

// resolved is path with its links resolved, or path itself when it
// cannot be (gone).
func resolved(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}

// within reports whether path is dir or lies below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}

// start hands over the child of an earlier session in l's slot that runs
// l's command, or stops those in the slot and starts l.
func (h *Holder) start(ctx context.Context, session string, l launch) (startAnswer, error) {
	if session == "" || l.Name == "" || l.Path == "" || len(l.Args) == 0 {
		return startAnswer{}, errors.New("a start request needs a session, a name, a path and arguments")
	}
	if l.Slot == "" {
		l.Slot = l.Name
	}
	fp := fingerprint(l)
	h.mu.Lock()
	h.noteSessionLocked(session)
	var (
		adopt   *heldProc
		replace []*heldProc
	)
	for _, hp := range h.held {
		if hp.session == session || hp.session == "" || hp.Slot != l.Slot || !hp.alive() {
			continue
		}
		if adopt == nil && hp.fingerprint == fp && sameDir(hp.Root, l.Root) {
			adopt = hp
			continue
		}
		replace = append(replace, hp)
	}
	if adopt != nil {
		adopt.session, adopt.Name = session, l.Name
	}
	for _, hp := range replace {
		hp.session = ""
	}
	h.mu.Unlock()

	for _, hp := range replace {
		h.log.Info("stopping a process left in the slot of a new one", "pid", hp.pid, "slot", l.Slot, "for", l.Name)
		hp.stop(ctx, h.log)
	}
	if adopt != nil {
		h.log.Info("process handed over to a new supervisor", "name", l.Name, "pid", adopt.pid)
		return startAnswer{PID: adopt.pid, StartTime: adopt.startTime, Adopted: true, Root: adopt.Root}, nil
	}
	cmd, err := l.start(ctx, h.log)
	if err != nil {
		return startAnswer{}, fmt.Errorf("starting %s: %w", l.Name, err)
	}
	hp := &heldProc{launch: l, fingerprint: fp, pid: cmd.Process.Pid, session: session, done: make(chan struct{})}
	hp.startTime, _ = procStartTime(hp.pid) // empty if already gone: the client sees it exited
	h.mu.Lock()
	h.held[hp.pid] = hp
	h.mu.Unlock()
	h.log.Info("process started for a supervisor", "name", l.Name, "pid", hp.pid)
	go func() {
		attrs := ownChild{cmd}.wait()
		h.mu.Lock()
		delete(h.held, hp.pid)
		name := hp.Name // a new supervisor may have renamed it
		h.mu.Unlock()
		close(hp.done)
		h.log.Info("held process exited", append([]any{"name", name}, attrs...)...)
	}()
	return startAnswer{PID: hp.pid, StartTime: hp.startTime}, nil
}

// noteSessionLocked starts the adoption window when session is new.
func (h *Holder) noteSessionLocked(session string) {
	if session == h.session {
		return
	}
	h.session = session
	if h.collect != nil {
		h.collect.Stop()
	}
	h.collect = time.AfterFunc(h.AdoptWindow, func() { h.collectUnclaimed(session) })
}

// collectUnclaimed stops the children no client claimed since session
// began, if session is still the newest.
func (h *Holder) collectUnclaimed(session string) {
	h.mu.Lock()
	if h.session != session {
		h.mu.Unlock()
		return
	}
	var left []*heldProc
	for _, hp := range h.held {
		if hp.session != session && hp.session != "" {
			hp.session = ""
			left = append(left, hp)
		}
	}
	h.mu.Unlock()
	for _, hp := range left {
		h.log.Info("stopping a process no supervisor took over", "pid", hp.pid, "slot", hp.Slot, "window", h.AdoptWindow)
		hp.stop(context.Background(), h.log)
	}
}

// StopAll stops every child (SIGTERM, SIGKILL after its grace period or at
// ctx's end) and waits until they are gone.
func (h *Holder) StopAll(ctx context.Context) {
	h.mu.Lock()
	if h.collect != nil {
		h.collect.Stop()
	}
	all := make([]*heldProc, 0, len(h.held))
	for _, hp := range h.held {
		hp.session = ""
		all = append(all, hp)
	}
	h.mu.Unlock()
	h.stopEach(ctx, all)
}

// alive reports whether the child runs: not reaped and not a zombie.
func (hp *heldProc) alive() bool {
	select {
	case <-hp.done:
		return false
	default:
	}
	st, err := procStartTime(hp.pid)
	return err == nil && st == hp.startTime
}

// stop ends the child's process group: SIGTERM, then SIGKILL after the
// grace period or when ctx ends; it waits until the child is reaped.
func (hp *heldProc) stop(ctx context.Context, log *slog.Logger) {
	killGroup(log, hp.pid, syscall.SIGTERM)
	grace := time.Duration(hp.GraceSeconds * float64(time.Second))
	if grace <= 0 {
		grace = DefaultGracePeriod
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-hp.done:
		return
	case <-timer.C:
	case <-ctx.Done():
	}
	killGroup(log, hp.pid, syscall.SIGKILL)
	<-hp.done
}

// fingerprint identifies l's command: two launches with the same one run
// the same thing when their Roots are one directory (see sameDir). Paths
// below l.Root count from it.
func fingerprint(l launch) string {
	args := make([]string, len(l.Args))
	for i, a := range l.Args {
		args[i] = fromRoot(a, l.Root)
	}
	sum := sha256.New()
	enc := json.NewEncoder(sum)
	_ = enc.Encode([]any{l.Path, args, l.Env, fromRoot(l.Dir, l.Root), fromRoot(l.LogPath, l.Root)})
	return hex.EncodeToString(sum.Sum(nil))
}

// rootMark stands for a launch's Root in its fingerprint; no argument
// holds a NUL byte.
const rootMark = "\x00root"

// fromRoot is s with every path below root (root then a slash, or root
// at s's end) naming root by rootMark; s itself when root is empty.
func fromRoot(s, root string) string {
	if root == "" {
		return s
	}
	root = filepath.Clean(root)
	s = strings.ReplaceAll(s, root+"/", rootMark+"/")
	if rest, ok := strings.CutSuffix(s, root); ok {
		s = rest + rootMark
	}
	return s
}

// sameDir reports whether the Roots a and b are one directory: the same
// path, or two paths that resolve to one (a link left where a directory
// was moved from). A Root that no longer resolves to its directory (the
// link removed) is not the same as the directory's new path.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	return a != "" && b != "" && resolved(a) == resolved(b)
}

// procStartTime returns field 22 of /proc/PID/stat (start time since
// boot), or an error when pid is gone or a zombie.
func procStartTime(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", fmt.Errorf("pid %d: unreadable stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return "", fmt.Errorf("pid %d: short stat", pid)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return "", fmt.Errorf("pid %d has exited", pid)
	}
	return fields[19], nil
}
