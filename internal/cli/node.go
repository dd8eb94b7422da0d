package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/bootstrap"
	"fke.dev/fke/internal/hostnet"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/manager"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/internal/nodeprovider"
	localnodes "fke.dev/fke/internal/nodeprovider/local"
)

// newDoctorCmd checks what local nodes need on this host.
func newDoctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host can run local nodes (root, containerd, runc, CNI plugins, iptables, ...)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			checks := localnodes.Checks(cmd.Context(), g.finder(), hostnet.New(nil, nil))
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CHECK\tRESULT\tFIX")
			for _, c := range checks {
				if c.Err == nil {
					fmt.Fprintf(tw, "%s\tok\t\n", c.Name)
					continue
				}
				fmt.Fprintf(tw, "%s\t%v\t%s\n", c.Name, c.Err, c.Fix)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed := localnodes.Failed(checks); len(failed) > 0 {
				return fmt.Errorf("%d of %d checks failed: node pools with --provider local cannot run here until they are fixed", len(failed), len(checks))
			}
			fmt.Fprintln(g.out, "this host can run local nodes (--provider local)")
			return nil
		},
	}
}

// removeLocalNodes removes every local node recorded under dataDir and the
// host network they used (fke down): the manager only stops their
// processes when it exits, so that their containers survive a restart.
func removeLocalNodes(ctx context.Context, g *globals) error {
	if _, err := os.Stat(filepath.Join(g.dataDir, "nodes")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	p, err := localnodes.New(localnodes.Options{DataDir: g.dataDir, Binaries: g.finder()})
	if err != nil {
		return err
	}
	if err := p.RemoveAll(ctx); err != nil {
		return fmt.Errorf("removing local nodes: %w", err)
	}
	return nil
}

func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Join hosts to clusters as worker nodes",
	}
	cmd.AddCommand(newNodeBootstrapFileCmd(g), newNodeJoinCmd(g))
	return cmd
}

// newNodeBootstrapFileCmd writes what `fke node join` needs.
func newNodeBootstrapFileCmd(g *globals) *cobra.Command {
	var pool string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "bootstrap-file CLUSTER --pool NAME",
		Short: "Print a bootstrap file (API server, CA, a new bootstrap token of the pool that expires after --ttl) for `fke node join`",
		Args:  exactArgs(1, "CLUSTER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nodejoin.CheckFileTokenTTL(ttl); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := g.client()
			if err != nil {
				return err
			}
			name := args[0]
			cl, err := g.getCluster(ctx, c, name)
			if err != nil {
				return err
			}
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: g.namespace, Name: fkev1.KubeconfigSecretName(name)}, s); err != nil {
				return fmt.Errorf("cluster %s has no kubeconfig yet: wait with `fke cluster get %s`: %w", name, name, err)
			}
			cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[fkev1.KubeconfigKey])
			if err != nil {
				return err
			}
			server, err := nodejoin.NodeServer(cfg.Host)
			if err != nil {
				return err
			}
			dns, err := nodejoin.DNSIP(cl.Spec.Network.ServiceCIDR)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			// A token of its own, so that it lives --ttl and no longer (the
			// pool's current token may live a day).
			token, expires, err := bootstrap.CreateToken(ctx, cs, pool, ttl)
			if err != nil {
				return err
			}
			// The file works once printed: the API server knows the token.
			probe := nodejoin.TokenProbe{Server: cfg.Host, TokenID: strings.SplitN(token, ".", 2)[0], Expires: expires}
			tokenCfg := rest.AnonymousClientConfig(cfg)
			tokenCfg.BearerToken = token
			if err := nodejoin.CheckToken(ctx, tokenCfg, probe, nodejoin.ProbeLimits{Grace: time.Minute, Unreachable: time.Minute, Interval: 200 * time.Millisecond}); err != nil {
				return fmt.Errorf("the new bootstrap token of pool %s: %w", pool, err)
			}
			bf := nodejoin.BootstrapFile{
				Cluster: g.namespace + "/" + name, Pool: pool, Server: server, CertificateAuthorityData: cfg.CAData,
				Token: token, TokenExpires: &metav1.Time{Time: expires}, ClusterDNS: dns, PodCIDR: cl.Spec.Network.PodCIDR,
			}
			// The registry as nodes reach it, when fke runs one.
			if st, err := managementplane.ReadState(g.dataDir); err == nil && st.Registry != "" {
				if bf.Registry, err = nodejoin.NodeRegistry(st.Registry); err != nil {
					return err
				}
			}
			data, err := bf.Marshal()
			if err != nil {
				return err
			}
			_, err = g.out.Write(data)
			return err
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "node pool whose bootstrap token the node joins with (its Node gets fke.dev/nodepool=NAME)")
	cmd.Flags().DurationVar(&ttl, "ttl", nodejoin.TokenTTL, fmt.Sprintf("how long the token stays valid (%s to %s)", nodejoin.FileTokenMinTTL, nodejoin.TokenTTL))
	_ = cmd.MarkFlagRequired("pool")
	return cmd
}

// newNodeJoinCmd runs this host's node until interrupted.
func newNodeJoinCmd(g *globals) *cobra.Command {
	var file, name string
	var apiTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "join --bootstrap FILE --name NAME",
		Short: "Run this host as a worker node of a cluster (TLS bootstrap with a bootstrap file) until interrupted",
		Long: `Run this host as a worker node of a cluster until interrupted. First the
bootstrap file's token is checked against its API server: a token that is
refused (wrong, expired or deleted), an API server whose certificate the
file's CA does not verify, or one that does not answer within --api-timeout
ends the join with the reason, as does a node that fails to start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("reading the bootstrap file: %w", err)
			}
			bf, err := nodejoin.ParseBootstrapFile(data)
			if err != nil {
				return err
			}
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return fmt.Errorf("--name %q is not a node name: %v", name, errs)
			}
			kubelet, err := bootstrap.BootstrapKubeconfig(bf.Server, bf.CertificateAuthorityData, bf.Token)
			if err != nil {
				return err
			}
			if err := checkJoinToken(cmd.Context(), bf, kubelet, apiTimeout); err != nil {
				return fmt.Errorf("node %s cannot join %s: %w", name, bf.Cluster, err)
			}
			host := hostnet.New(nil, nil)
			if err := localnodes.Unavailable(localnodes.Checks(cmd.Context(), g.finder(), host)); err != nil {
				return fmt.Errorf("this host cannot run a node (see `fke doctor`): %w", err)
			}
			return joinNode(cmd.Context(), g, bf, kubelet, name, host)
		},
	}
	cmd.Flags().StringVar(&file, "bootstrap", "", "bootstrap file (from `fke node bootstrap-file`)")
	cmd.Flags().StringVar(&name, "name", "", "the Node's name")
	cmd.Flags().DurationVar(&apiTimeout, "api-timeout", nodejoin.DefaultProbeLimits.Unreachable, "how long to try the API server while it does not answer before giving up")
	_ = cmd.MarkFlagRequired("bootstrap")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// checkJoinToken checks the bootstrap file's token against its API server,
// as the kubelet will present it (the bootstrap kubeconfig kubelet).
func checkJoinToken(ctx context.Context, bf nodejoin.BootstrapFile, kubelet []byte, apiTimeout time.Duration) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubelet)
	if err != nil {
		return err
	}
	probe := nodejoin.TokenProbe{Server: bf.Server, TokenID: bf.TokenID()}
	if bf.TokenExpires != nil {
		probe.Expires = bf.TokenExpires.Time
	}
	lim := nodejoin.DefaultProbeLimits
	lim.Unreachable = apiTimeout
	return nodejoin.CheckToken(ctx, cfg, probe, lim)
}

// joinStatePoll is how often `fke node join` looks at its node's state.
const joinStatePoll = 2 * time.Second

// joinNode runs the node until ctx ends, or until it fails, then removes it
// from this host (its Node stays in the cluster, NotReady, until deleted
// there). The node's containerd trusts and mirrors the bootstrap file's
// registry and pulls its sandbox image there, as local nodes of the
// manager do. kubelet is the kubelet's bootstrap kubeconfig.
func joinNode(ctx context.Context, g *globals, bf nodejoin.BootstrapFile, kubelet []byte, name string, host *hostnet.Host) error {
	p, err := localnodes.New(joinOptions(g, bf, host, os.Getenv))
	if err != nil {
		return err
	}
	key := "joined/" + strings.ReplaceAll(bf.Cluster, "/", ".")
	pc := nodeprovider.Cluster{Key: key, Name: bf.Cluster, PodCIDR: bf.PodCIDR, Join: &nodeprovider.Join{
		Server: bf.Server, CAPEM: bf.CertificateAuthorityData, DNSIP: bf.ClusterDNS,
		Credentials: nodejoin.StaticCredentials{Kubelet: kubelet},
	}}
	it, err := p.HostInstanceType()
	if err != nil {
		return err
	}
	tmpl := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{fkev1.LabelNodePool: bf.Pool}}}
	in, err := p.Create(ctx, pc, nodeprovider.NodeSpec{MachineName: name, InstanceType: it, Template: tmpl})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.out, "node %s joining %s at %s (files under %s); interrupt to stop and remove it from this host\n", name, bf.Cluster, bf.Server, filepath.Join(g.dataDir, "nodes"))
	failure := waitNodeFailure(ctx, p, pc, in.ProviderID)
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Delete(stopCtx, pc, in.ProviderID); err != nil {
		return errors.Join(failure, fmt.Errorf("removing node %s from this host: %w", name, err))
	}
	fmt.Fprintf(g.out, "node %s removed from this host\n", name)
	if failure != nil {
		return fmt.Errorf("node %s failed: %w", name, failure)
	}
	return nil
}

// waitNodeFailure returns nil when ctx ends, or why the node providerID
// failed (a process that keeps exiting, a start that failed).
func waitNodeFailure(ctx context.Context, p *localnodes.Provider, pc nodeprovider.Cluster, providerID string) error {
	tick := time.NewTicker(joinStatePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		in, err := p.Get(ctx, pc, providerID)
		if err == nil && in.State == nodeprovider.InstanceFailed {
			return errors.New(in.Message)
		}
	}
}

// joinOptions configure the local provider of a joined host: the bootstrap
// file's registry (trusted, mirrored, the sandbox image's source unless
// $FKE_NODE_PAUSE_IMAGE names another) and the images of $FKE_NODE_IMAGES.
func joinOptions(g *globals, bf nodejoin.BootstrapFile, host *hostnet.Host, getenv func(string) string) localnodes.Options {
	return localnodes.Options{
		DataDir: g.dataDir, Binaries: g.finder(), Host: host, Logger: newLogger(g.errOut),
		PauseImage: getenv(manager.EnvNodePauseImage), Registry: bf.Registry, Images: splitList(getenv(manager.EnvNodeImages)),
	}
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
