package local

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/controlplane"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// upgradeReadyTimeout bounds how long a new component may take to be ready,
// and upgradeMaxExits how often it may exit before: a new version that
// crashes at start is given up in seconds, not minutes.
const (
	upgradeReadyTimeout = 2 * time.Minute
	upgradeMaxExits     = 2
)

// waitNew waits until p, a component just started at a new version, is
// ready; it gives up when p has exited upgradeMaxExits times.
func waitNew(ctx context.Context, p *supervisor.Process) error {
	ctx, cancel := context.WithTimeout(ctx, upgradeReadyTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.WaitReady(ctx) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if n := p.Restarts(); n >= upgradeMaxExits {
				cancel()
				<-done
				return fmt.Errorf("it exited %d times without becoming ready", n)
			}
		}
	}
}

// Upgrade implements controlplane.Runtime.
//
// The API server is replaced without a gap: every API server fke starts
// binds its port with SO_REUSEPORT (--permit-port-sharing), so the new
// version starts beside the old one on the same port, and the old one stops
// only once the new one answers /readyz itself. kube-controller-manager and
// kube-scheduler run without leader election (one of each per cluster), so
// they are stopped and then started at the new version; while they restart
// the API serves, only controllers and scheduling pause for a few seconds.
func (r *Runtime) Upgrade(ctx context.Context, spec controlplane.Spec, component string) error {
	switch component {
	case controlplane.APIServer, controlplane.ControllerManager, controlplane.Scheduler:
	default:
		return fmt.Errorf("upgrading %s of %s: only kube-apiserver, kube-controller-manager and kube-scheduler are upgraded", component, spec.Key)
	}
	r.mu.Lock()
	cur, running := r.procs[spec.Key][component]
	r.mu.Unlock()
	if !running {
		return fmt.Errorf("upgrading %s of %s: the control plane is not running", component, spec.Key)
	}
	if cur.version == spec.Version {
		return nil
	}
	if strings.HasSuffix(cur.name, "/"+planeProcess) {
		return fmt.Errorf("upgrading %s of %s to %s: the control plane runs its components in one process (%s, built for %s only), which is not upgraded component by component",
			component, spec.Key, spec.Version, binaries.KubePlane, cur.version)
	}
	path, err := r.binary(component, spec.Version)
	if err != nil {
		return fmt.Errorf("upgrading %s of %s to %s: %w", component, spec.Key, spec.Version, err)
	}
	layout := newLayout(r.DataDir(spec.Key))
	if spec, err = withClusterName(spec, layout); err != nil {
		return fmt.Errorf("upgrading %s of %s: %w", component, spec.Key, err)
	}
	if component == controlplane.APIServer {
		return r.replaceAPIServer(ctx, spec, layout, cur, path)
	}
	return r.restartAt(ctx, spec, layout, component, cur, path)
}

// replaceAPIServer starts the API server of spec.Version beside the running
// one, waits until it serves, then stops the old one.
func (r *Runtime) replaceAPIServer(ctx context.Context, spec controlplane.Spec, l layout, cur componentProc, path string) error {
	apiTLS, err := clientTLS(spec.PKI, pki.CACertFile, pki.Manager)
	if err != nil {
		return err
	}
	next := componentProc{name: processName(spec.Key, controlplane.APIServer) + "@" + spec.Version, version: spec.Version}
	// Both write the one log: what the new one wrote is after logStart,
	// and not under the old one's pid.
	logStart, oldPID := logSize(l.log(controlplane.APIServer)), 0
	if old := r.group.Get(cur.name); old != nil {
		oldPID = old.Pid()
	}
	p, err := r.group.Start(ctx, supervisor.Spec{
		Name: next.name, Slot: slot(spec, controlplane.APIServer), Root: l.root, Path: path, Args: apiServerArgs(l, spec), Env: componentEnv(controlplane.APIServer), LogPath: l.log(controlplane.APIServer),
		Ready: versionReady(endpoint(spec), apiTLS, spec.Version),
	})
	if err != nil {
		return fmt.Errorf("starting kube-apiserver %s of %s: %w", spec.Version, spec.Key, err)
	}
	if err := waitNew(ctx, p); err != nil {
		stopErr := r.group.Stop(context.WithoutCancel(ctx), next.name)
		return fmt.Errorf("kube-apiserver %s of %s did not become ready (%w); %s keeps serving%s",
			spec.Version, spec.Key, err, cur.version, logHint(l.log(controlplane.APIServer), logStart, oldPID, stopErr))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.group.Stop(ctx, cur.name); err != nil {
		return fmt.Errorf("stopping kube-apiserver %s of %s: %w", cur.version, spec.Key, err)
	}
	r.procs[spec.Key][controlplane.APIServer] = next
	r.log.Info("upgraded control-plane component", "cluster", spec.Key, "component", controlplane.APIServer, "from", cur.version, "to", spec.Version)
	return nil
}

// restartAt stops component and starts it at spec.Version; when the new
// version does not become ready, the old version is started again.
func (r *Runtime) restartAt(ctx context.Context, spec controlplane.Spec, l layout, component string, cur componentProc, path string) error {
	port := spec.Ports.ControllerManager
	if component == controlplane.Scheduler {
		port = spec.Ports.Scheduler
	}
	start := func(version, bin string) (*supervisor.Process, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := r.group.Stop(ctx, r.procName(spec.Key, component)); err != nil {
			return nil, err
		}
		name := processName(spec.Key, component) + "@" + version
		p, err := r.group.Start(ctx, supervisor.Spec{
			Name: name, Slot: slot(spec, component), Root: l.root, Path: bin, Args: componentArgs(component, l, spec), Env: componentEnv(component), LogPath: l.log(component),
			Ready: supervisor.WaitHTTPReady(fmt.Sprintf("https://127.0.0.1:%d/healthz", port), selfSignedTLS()),
		})
		if err != nil {
			return nil, err
		}
		r.procs[spec.Key][component] = componentProc{name: name, version: version}
		return p, nil
	}
	p, err := start(spec.Version, path)
	if err == nil {
		err = waitNew(ctx, p)
	}
	if err == nil {
		r.log.Info("upgraded control-plane component", "cluster", spec.Key, "component", component, "from", cur.version, "to", spec.Version)
		return nil
	}
	failed := fmt.Errorf("%s %s of %s did not become ready: %w", component, spec.Version, spec.Key, err)
	oldPath, perr := r.binary(component, cur.version)
	if perr != nil {
		return fmt.Errorf("%w; restarting %s failed: %v", failed, cur.version, perr)
	}
	if _, serr := start(cur.version, oldPath); serr != nil {
		return fmt.Errorf("%w; restarting %s failed: %v", failed, cur.version, serr)
	}
	return fmt.Errorf("%w; %s runs again%s", failed, cur.version, logHint(l.log(component), -1, 0, nil))
}

// versionReady is the readiness check of an API server started beside
// another on the same port: over one connection it asks /version, and only
// when the answer is version (the new server accepted this connection) asks
// /readyz. Each try opens a new connection, which the kernel hands to either
// server.
func versionReady(endpoint string, tlsCfg *tls.Config, version string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		tr := &http.Transport{TLSClientConfig: tlsCfg.Clone(), MaxConnsPerHost: 1}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		get := func(path string) ([]byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+path, nil)
			if err != nil {
				return nil, err
			}
			resp, err := c.Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("GET %s: status %d: %.200s", path, resp.StatusCode, body)
			}
			return body, nil
		}
		body, err := get("/version")
		if err != nil {
			return err
		}
		var info struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := json.Unmarshal(body, &info); err != nil {
			return fmt.Errorf("reading /version: %w", err)
		}
		if info.GitVersion != version {
			return fmt.Errorf("answered by the API server at %s, waiting for %s", info.GitVersion, version)
		}
		_, err = get("/readyz")
		return err
	}
}

// logSize is the size of the log at path (0 when there is none).
func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logHint returns the last lines of a component's log for an error
// message: of what was written after offset since (the last 4 kB when
// since < 0), the lines that are not klog lines of the process exceptPID
// (0: none), which writes the same log.
func logHint(path string, since int64, exceptPID int, stopErr error) string {
	var b strings.Builder
	if stopErr != nil {
		fmt.Fprintf(&b, " (stopping it: %v)", stopErr)
	}
	f, err := os.Open(path)
	if err != nil {
		return b.String()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && since < 0 {
		since = max(0, st.Size()-4096)
	}
	if _, err := f.Seek(since, io.SeekStart); err != nil {
		return b.String()
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return b.String()
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// klog: "I1205 00:02:26.298752    2322 file.go:10] ..."
		if f := strings.Fields(line); exceptPID != 0 && len(f) > 2 && f[2] == strconv.Itoa(exceptPID) {
			continue
		}
		lines = append(lines, line)
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	fmt.Fprintf(&b, "; last log lines: %s", strings.Join(lines, " | "))
	return b.String()
}
