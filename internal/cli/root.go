// Package cli implements the fke command line (cobra commands); cmd/fke only wires it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"syscall"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/manager"
)

// globals are the flags every command takes.
type globals struct {
	dataDir string
	// kubeconfig, when set, names the management API (an fke installed
	// with the Helm chart) instead of the local management plane.
	kubeconfig string
	binDir     string
	namespace  string
	out        io.Writer
	errOut     io.Writer
}

// NewRoot returns the fke command.
func NewRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "fke",
		Short: "fke runs Kubernetes clusters with GPU node pools, locally or as a service",
		Long: `fke is a managed Kubernetes engine for GPU workloads.

  fke up                         start the local management plane
  fke cluster create demo        create a tenant cluster (real control plane)
  fke kubeconfig demo > kc       use it with kubectl
  fke down                       stop everything`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			g.out, g.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
		},
	}
	root.PersistentFlags().StringVar(&g.dataDir, "data-dir", managementplane.DefaultDataDir(), "directory of the local management plane (env "+managementplane.EnvHome+")")
	root.PersistentFlags().StringVar(&g.binDir, "bin-dir", os.Getenv(binaries.EnvDir), "directory of the upstream binaries (env "+binaries.EnvDir+"; default: next to fke, then ./_output/bin)")
	root.PersistentFlags().StringVar(&g.kubeconfig, "kubeconfig", "", "kubeconfig of the management API, for fke-manager installed on a Kubernetes cluster with the Helm chart (default: the local management plane's)")
	root.PersistentFlags().StringVarP(&g.namespace, "namespace", "n", "default", "management namespace of clusters and node pools")
	root.AddCommand(
		newUpCmd(g), newDownCmd(g), newStatusCmd(g),
		newClusterCmd(g), newKubeconfigCmd(g), newNodePoolCmd(g), newInstanceTypesCmd(g), newVersionsCmd(g), newVersionCmd(g),
		newImageCmd(g), newDaemonCmd(g), newManagerCmd(g), newDoctorCmd(g), newNodeCmd(g),
		newDeployCmd(g), newRollbackCmd(g), newReleasesCmd(g), newReleaseCmd(g),
	)
	return root
}

// Execute runs the root command and returns the process exit code.
func Execute() int {
	ctx, cancel := signalContext()
	defer cancel()
	if err := NewRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	return 0
}

func (g *globals) finder() binaries.Finder { return binaries.Finder{Dir: g.binDir} }

// restConfig returns the management API's config, or a clear error when the
// management plane is not running.
func (g *globals) restConfig() (*rest.Config, error) {
	path := g.kubeconfig
	if path == "" {
		if _, err := managementplane.ReadState(g.dataDir); err != nil {
			return nil, err
		}
		path = managementplane.Paths{Dir: g.dataDir}.Kubeconfig()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading management kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// client returns a client of the management API.
func (g *globals) client() (client.Client, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the management API: %w", err)
	}
	return c, nil
}

// explain turns API errors into messages that say what to do.
func explain(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s not found: list them with `fke cluster list`", what)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s already exists", what)
	case apierrors.IsInvalid(err):
		return fmt.Errorf("invalid %s: %w", what, err)
	}
	var uerr *url.Error
	var nerr *net.OpError
	if errors.As(err, &uerr) || errors.As(err, &nerr) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("the management API does not answer (%v): check `fke status`", err)
	}
	return err
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func signalContext() (context.Context, context.CancelFunc) {
	return signalNotifyContext(context.Background())
}
