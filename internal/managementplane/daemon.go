package managementplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/encryption"
	"fke.dev/fke/internal/pki"
	"fke.dev/fke/internal/supervisor"
)

// DaemonOptions configure the daemon.
type DaemonOptions struct {
	DataDir  string
	Binaries binaries.Finder
	// Self is the fke executable; the daemon runs `Self manager ...` as fke-manager.
	Self   string
	Logger *slog.Logger
	// WarmPool is the number of standby control planes fke-manager keeps
	// ready for new clusters (0: none).
	WarmPool int
	// OneProcessPlanes has fke-manager run each new tenant control plane of
	// the default version in one process (manager.Options).
	OneProcessPlanes bool
}

// ports are the management plane's loopback ports, kept in ports.json.
type ports struct {
	APIServer  int `json:"apiServer"`
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
	Manager    int `json:"managerHealth"`
	// Webhook is fke-manager's admission webhook (added later: data
	// directories from before it get one on their next start).
	Webhook int `json:"webhook"`
	// Registry is the OCI registry's (added later too).
	Registry int `json:"registry"`
}

// Daemon runs the management plane until ctx ends, then stops every process
// it started. It returns an error when it cannot start.
func Daemon(ctx context.Context, opts DaemonOptions) error {
	p := Paths{Dir: opts.DataDir}
	log := opts.Logger
	for _, d := range []string{p.Dir, p.Logs(), p.PKI()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	lock, err := acquireLock(p.Lock())
	if err != nil {
		return err
	}
	defer lock.Close()

	st := State{PID: os.Getpid(), Phase: PhaseStarting, StartedAt: time.Now().UTC(), Kubeconfig: p.Kubeconfig()}
	publish := func(phase, msg string) {
		st.Phase, st.Message = phase, msg
		if err := writeState(p, st); err != nil {
			log.Error("writing state", "error", err)
		}
	}
	defer os.Remove(p.State())
	publish(PhaseStarting, "preparing certificates")

	bins, err := opts.Binaries.Paths(binaries.Etcd, binaries.KubeAPIServer)
	if err != nil {
		publish(PhaseFailed, err.Error())
		return err
	}
	pt, err := loadPorts(p)
	if err != nil {
		publish(PhaseFailed, err.Error())
		return err
	}
	bundle, err := ensureManagementPKI(p)
	if err != nil {
		publish(PhaseFailed, err.Error())
		return err
	}
	if err := encryption.EnsureFile(p.EncryptionConfig()); err != nil {
		err = fmt.Errorf("management encryption key: %w", err)
		publish(PhaseFailed, err.Error())
		return err
	}
	endpoint := "https://127.0.0.1:" + strconv.Itoa(pt.APIServer)
	st.Endpoint = endpoint
	kc, err := pki.Kubeconfig("fke-management", endpoint, bundle[pki.CACertFile], bundle[pki.AdminCertFile], bundle[pki.AdminKeyFile], pki.AdminUser)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.Kubeconfig(), kc, 0o600); err != nil {
		return fmt.Errorf("writing management kubeconfig: %w", err)
	}

	// The daemon holds the tenant control planes fke-manager runs, so that
	// they serve on when it crashes; they stop after it, with the daemon.
	holderArgs, stopHolder := startHolder(p, log.With("component", "process-holder"))
	defer stopHolder()

	group := supervisor.NewGroup(log)
	defer func() {
		publish(PhaseStopping, "stopping")
		stopCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := group.StopAll(stopCtx); err != nil {
			log.Error("stopping management plane", "error", err)
		}
	}()

	publish(PhaseStarting, "starting etcd and kube-apiserver")
	procs, err := startManagementPlane(ctx, group, p, bins, pt)
	if err != nil {
		publish(PhaseFailed, err.Error())
		return err
	}
	registry := startRegistry(ctx, group, p, opts.Binaries, pt, log, &st)
	if registry != nil {
		procs = append(procs, registry)
	}
	for _, proc := range procs {
		if err := waitReady(ctx, proc, 2*time.Minute); err != nil {
			err = fmt.Errorf("%w (logs in %s)", err, p.Logs())
			publish(PhaseFailed, err.Error())
			return err
		}
	}

	publish(PhaseInstalling, "installing the fke.dev API")
	if err := installAPI(ctx, p.Kubeconfig()); err != nil {
		publish(PhaseFailed, err.Error())
		return err
	}

	publish(PhaseManager, "starting fke-manager")
	mgr, err := group.Start(ctx, supervisor.Spec{
		Name: "fke-manager",
		Path: opts.Self,
		Args: append([]string{"manager", "--kubeconfig", p.Kubeconfig(), "--data-dir", p.Dir,
			"--health-addr", "127.0.0.1:" + strconv.Itoa(pt.Manager),
			"--webhook-port", strconv.Itoa(pt.Webhook), "--webhook-cert-dir", p.WebhookPKI(),
			"--warm-pool", strconv.Itoa(opts.WarmPool)}, append(append(registryArgs(st.Registry), holderArgs...), oneProcessArgs(opts.OneProcessPlanes)...)...),
		Env:     append(os.Environ(), binaries.EnvDir+"="+binDirOf(bins[binaries.Etcd])),
		LogPath: filepath.Join(p.Logs(), "fke-manager.log"),
		Ready:   supervisor.WaitHTTPReady("http://127.0.0.1:"+strconv.Itoa(pt.Manager)+"/readyz", nil),
	})
	if err != nil {
		publish(PhaseFailed, err.Error())
		return err
	}
	if err := waitReady(ctx, mgr, time.Minute); err != nil {
		err = fmt.Errorf("%w (log in %s)", err, filepath.Join(p.Logs(), "fke-manager.log"))
		publish(PhaseFailed, err.Error())
		return err
	}
	procs = append(procs, mgr)
	log.Info("management plane ready", "endpoint", endpoint)
	if st.Registry != "" {
		go pushSystemImages(ctx, st.Registry, opts.Binaries, log.With("component", "images"))
	}

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		st.Components = st.Components[:0]
		allReady := true
		for _, proc := range procs {
			ready := proc.State() == supervisor.Ready
			allReady = allReady && ready
			st.Components = append(st.Components, Component{Name: proc.Name(), PID: proc.Pid(), Ready: ready, Restarts: proc.Restarts()})
		}
		if allReady {
			publish(PhaseReady, "")
		} else {
			publish(PhaseStarting, "a component is restarting")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// startHolder serves a supervisor.Holder for fke-manager and returns the
// manager's arguments that point at it, and the function that stops every
// process it holds. Where no socket can be made (a data directory's path
// too long for one), the manager runs its processes itself (they then end
// with it).
func startHolder(p Paths, log *slog.Logger) ([]string, func()) {
	socket := p.HolderSocket()
	ln, err := supervisor.ListenHolder(socket)
	if err != nil {
		log.Warn("no process holder; tenant control planes and local nodes end when fke-manager does", "error", err)
		return nil, func() {}
	}
	h := supervisor.NewHolder(log)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := h.Serve(ctx, ln); err != nil {
			log.Error("process holder stopped", "error", err)
		}
	}()
	return []string{"--process-holder", socket}, func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer stopCancel()
		h.StopAll(stopCtx)
		cancel()
		<-served
	}
}

// startRegistry starts the OCI registry and records its address in st; when
// its binary is missing, fke runs without it and st says why.
func startRegistry(ctx context.Context, g *supervisor.Group, p Paths, finder binaries.Finder, pt ports, log *slog.Logger, st *State) *supervisor.Process {
	bin, err := finder.Path(binaries.Registry)
	if err == nil {
		var spec supervisor.Spec
		if spec, err = registrySpec(p, bin, pt.Registry); err == nil {
			var proc *supervisor.Process
			if proc, err = g.Start(ctx, spec); err == nil {
				st.Registry = "127.0.0.1:" + strconv.Itoa(pt.Registry)
				return proc
			}
		}
	}
	st.RegistryError = err.Error()
	log.Warn("running without the OCI registry: local nodes cannot pull images", "error", err.Error())
	return nil
}

// registryArgs passes the registry's address to fke-manager.
func registryArgs(addr string) []string {
	if addr == "" {
		return nil
	}
	return []string{"--registry", addr}
}

func waitReady(ctx context.Context, proc *supervisor.Process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := proc.WaitReady(ctx); err != nil {
		return fmt.Errorf("%s did not become ready: %w", proc.Name(), err)
	}
	return nil
}

func binDirOf(path string) string { return filepath.Dir(path) }

func startManagementPlane(ctx context.Context, g *supervisor.Group, p Paths, bins map[string]string, pt ports) ([]*supervisor.Process, error) {
	pk := func(f string) string { return filepath.Join(p.PKI(), f) }
	etcdURL := "https://127.0.0.1:" + strconv.Itoa(pt.EtcdClient)
	// One member: the peer port takes TLS and only the etcd peer certificate
	// (etcd cannot listen on no peer URL).
	peerURL := "https://127.0.0.1:" + strconv.Itoa(pt.EtcdPeer)
	b, err := loadBundle(p.PKI())
	if err != nil {
		return nil, err
	}
	etcdTLS, err := supervisor.ClientTLS(b[pki.EtcdCACertFile], b[pki.APIServerEtcdClientCertFile], b[pki.APIServerEtcdClientKeyFile])
	if err != nil {
		return nil, err
	}
	apiTLS, err := supervisor.ClientTLS(b[pki.CACertFile], b[pki.AdminCertFile], b[pki.AdminKeyFile])
	if err != nil {
		return nil, err
	}
	specs := []supervisor.Spec{
		{
			Name: "etcd", Path: bins[binaries.Etcd],
			Args: []string{
				"--name=management", "--data-dir=" + p.Etcd(),
				"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
				"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
				"--initial-cluster=management=" + peerURL,
				"--cert-file=" + pk(pki.EtcdServerCertFile), "--key-file=" + pk(pki.EtcdServerKeyFile),
				"--trusted-ca-file=" + pk(pki.EtcdCACertFile), "--client-cert-auth=true",
				"--peer-cert-file=" + pk(pki.EtcdPeerCertFile), "--peer-key-file=" + pk(pki.EtcdPeerKeyFile),
				"--peer-trusted-ca-file=" + pk(pki.EtcdCACertFile), "--peer-client-cert-auth=true",
				"--peer-cert-allowed-cn=" + pki.EtcdPeerCommonName,
				"--log-level=warn",
			},
			LogPath: filepath.Join(p.Logs(), "etcd.log"),
			Ready:   supervisor.WaitHTTPReady(etcdURL+"/readyz", etcdTLS),
		},
		{
			Name: "kube-apiserver", Path: bins[binaries.KubeAPIServer],
			Args: []string{
				"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
				"--secure-port=" + strconv.Itoa(pt.APIServer),
				"--etcd-servers=" + etcdURL,
				"--etcd-cafile=" + pk(pki.EtcdCACertFile),
				"--etcd-certfile=" + pk(pki.APIServerEtcdClientCertFile),
				"--etcd-keyfile=" + pk(pki.APIServerEtcdClientKeyFile),
				"--tls-cert-file=" + pk(pki.APIServerCertFile),
				"--tls-private-key-file=" + pk(pki.APIServerKeyFile),
				"--client-ca-file=" + pk(pki.CACertFile),
				"--service-account-key-file=" + pk(pki.SAPubFile),
				"--service-account-signing-key-file=" + pk(pki.SAKeyFile),
				"--service-account-issuer=https://fke-management.local",
				"--encryption-provider-config=" + p.EncryptionConfig(),
				"--service-cluster-ip-range=10.0.0.0/24",
				"--authorization-mode=RBAC",
				"--profiling=false",
			},
			LogPath: filepath.Join(p.Logs(), "kube-apiserver.log"),
			Ready:   supervisor.WaitHTTPReady("https://127.0.0.1:"+strconv.Itoa(pt.APIServer)+"/readyz", apiTLS),
		},
	}
	var procs []*supervisor.Process
	for _, s := range specs {
		proc, err := g.Start(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", s.Name, err)
		}
		procs = append(procs, proc)
	}
	return procs, nil
}

// loadPorts returns the recorded ports, or picks and records free ones.
func loadPorts(p Paths) (ports, error) {
	var pt ports
	if data, err := os.ReadFile(p.Ports()); err == nil {
		if err := json.Unmarshal(data, &pt); err != nil {
			return pt, fmt.Errorf("decoding %s: %w", p.Ports(), err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return pt, err
	}
	// Fill in the missing ports only: the recorded ones stay.
	missing := []*int{}
	for _, p := range []*int{&pt.APIServer, &pt.EtcdClient, &pt.EtcdPeer, &pt.Manager, &pt.Webhook, &pt.Registry} {
		if *p == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return pt, nil
	}
	// A recorded port is free too while the daemon is down: never hand it out twice.
	taken := map[int]bool{pt.APIServer: true, pt.EtcdClient: true, pt.EtcdPeer: true, pt.Manager: true, pt.Webhook: true, pt.Registry: true}
	free, err := supervisor.FreePorts(len(missing) + len(taken))
	if err != nil {
		return pt, fmt.Errorf("finding free ports: %w", err)
	}
	for _, p := range missing {
		for taken[free[0]] {
			free = free[1:]
		}
		*p, taken[free[0]] = free[0], true
	}
	data, _ := json.Marshal(pt)
	if err := os.WriteFile(p.Ports(), data, 0o600); err != nil {
		return pt, fmt.Errorf("writing %s: %w", p.Ports(), err)
	}
	return pt, nil
}

// ensureManagementPKI completes the management plane's PKI on disk.
func ensureManagementPKI(p Paths) (pki.Bundle, error) {
	existing, err := loadBundle(p.PKI())
	if err != nil {
		return nil, err
	}
	b, changed, err := pki.EnsureBundle(existing, pki.ControlPlaneSpec{ClusterName: "fke-management"})
	if err != nil {
		return nil, fmt.Errorf("management PKI: %w", err)
	}
	if changed {
		for name, data := range b {
			if err := os.WriteFile(filepath.Join(p.PKI(), name), data, 0o600); err != nil {
				return nil, fmt.Errorf("writing %s: %w", name, err)
			}
		}
	}
	return b, nil
}

func loadBundle(dir string) (pki.Bundle, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return pki.Bundle{}, nil
		}
		return nil, err
	}
	b := pki.Bundle{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		b[e.Name()] = data
	}
	return b, nil
}

// oneProcessArgs passes OneProcessPlanes on to the daemon and fke-manager,
// whatever their flag's default.
func oneProcessArgs(one bool) []string {
	return []string{"--one-process-planes=" + strconv.FormatBool(one)}
}
