package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"fke.dev/fke/internal/binaries"
	"fke.dev/fke/internal/image"
	"fke.dev/fke/internal/managementplane"
	"fke.dev/fke/internal/nodejoin"
	"fke.dev/fke/internal/versions"
)

func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Push images to fke's registry and list them (by the names pods use, on this host and on local nodes)",
	}
	cmd.AddCommand(newImagePushCmd(g), newImagePushManagerCmd(g), newImagePushControlPlaneCmd(g), newImageListCmd(g))
	return cmd
}

// registry returns the registry of the running management plane.
func (g *globals) registry() (image.Registry, error) {
	st, err := managementplane.ReadState(g.dataDir)
	if err != nil {
		return image.Registry{}, err
	}
	if st.Registry == "" {
		return image.Registry{}, fmt.Errorf("fke's registry is not running (%s): build it with `make binaries` and restart with `fke down && fke up`", st.RegistryError)
	}
	return image.Registry{Host: st.Registry}, nil
}

func newImagePushCmd(g *globals) *cobra.Command {
	var rename string
	cmd := &cobra.Command{
		Use:   "push TAR|DIR",
		Short: "Push the images of a docker-archive tar (docker save) or an OCI image layout directory",
		Example: `  docker save myapp:v1 -o myapp.tar && fke image push myapp.tar
  fke image push ./oci-layout --name team/app:v2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			loaded, err := image.Load(args[0])
			if err != nil {
				return err
			}
			if rename != "" && len(loaded) > 1 {
				return fmt.Errorf("%s holds %d images: --name applies to one; push them without --name", args[0], len(loaded))
			}
			names := make([]string, len(loaded))
			for i, l := range loaded {
				if names[i], err = l.Named(rename); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
			}
			reg, err := g.registry()
			if err != nil {
				return err
			}
			for i, l := range loaded {
				if _, err := reg.Ref(names[i]); err != nil {
					return err
				}
				var d fmt.Stringer
				if l.Index != nil {
					d, err = reg.PushIndex(cmd.Context(), names[i], l.Index)
				} else {
					d, err = reg.Push(cmd.Context(), names[i], l.Image)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(g.out, "pushed %s/%s (%s)\n", reg.Host, names[i], d)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rename, "name", "", "push as REPOSITORY[:TAG] (default: the name in the file)")
	return cmd
}

func newImagePushManagerCmd(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "push-manager",
		Short: "Build fke-manager's image (for the Helm chart charts/fke) and push it to fke's registry",
		Long: `Build fke-manager's image without Docker, from the fke-manager binary (built
by ` + "`make build`" + `; found where fke finds the upstream binaries, or named with
--from), and push it to fke's registry as ` + image.Manager.Name + `, the image the
Helm chart charts/fke runs. Local nodes pull it from the registry's address on
the node bridge, which this command prints with the Helm values that select it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, err := g.registry()
			if err != nil {
				return err
			}
			if from == "" {
				if from, err = g.finder().Path(binaries.Manager); err != nil {
					return fmt.Errorf("%s is built by `make build` (next to fke), or name it with --from: %w", binaries.Manager, err)
				}
			}
			img, err := image.Manager.Build(from)
			if err != nil {
				return err
			}
			d, err := reg.Push(cmd.Context(), image.Manager.Name, img)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "pushed %s (%s)\n", image.Manager.Ref(reg.Host), d)
			if nodeReg, err := nodejoin.NodeRegistry(reg.Host); err == nil {
				fmt.Fprintf(g.out, "local nodes pull it as %s; install the chart with:\n  --set image.registry=%s --set image.digest=%s\n",
					image.Manager.Ref(nodeReg), nodeReg, d)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the fke-manager binary to pack (default: the one fke finds, as for the upstream binaries)")
	return cmd
}

func newImagePushControlPlaneCmd(g *globals) *cobra.Command {
	var vers []string
	cmd := &cobra.Command{
		Use:   "push-control-plane",
		Short: "Build the hosted runtime's control-plane images and push them to fke's registry",
		Long: `Build the images the hosted runtime runs (kube-apiserver,
kube-controller-manager and kube-scheduler of each --version, etcd
` + image.EtcdVersion + `, kwok ` + image.KwokVersion + ` for simulated nodes, and the addons it runs beside a
control plane: metrics-server and the GPU metrics adapter) without Docker,
from the binaries fke runs, with each
binary at /usr/local/bin as in the upstream images, and push them to fke's
registry as ` + image.ControlPlaneRepository + `/<binary>:<tag>. It prints the value of
fke-manager's --hosted-registry that names them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, v := range vers {
				if err := versions.CheckRunnable(v); err != nil {
					return fmt.Errorf("--version: %w", err)
				}
			}
			reg, err := g.registry()
			if err != nil {
				return err
			}
			var images []image.SystemImage
			for i, v := range vers {
				cp := image.ControlPlaneImages(v)
				if i > 0 {
					cp = cp[:len(cp)-1] // etcd once
				}
				images = append(images, cp...)
			}
			images = append(images, image.Kwok)
			images = append(images, image.AddonImages()...)
			pushed, err := image.EnsureSystemImages(cmd.Context(), reg, g.finder(), nil, images...)
			for _, p := range pushed {
				fmt.Fprintf(g.out, "pushed %s/%s (%s)\n", reg.Host, p.Name, p.Digest)
			}
			if err != nil {
				return err
			}
			if nodeReg, err := nodejoin.NodeRegistry(reg.Host); err == nil {
				fmt.Fprintf(g.out, "local nodes pull them from %s; run fke-manager with:\n  --runtimes=hosted --hosted-registry=%s/%s\n",
					nodeReg, nodeReg, image.ControlPlaneRepository)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&vers, "version", []string{versions.Default}, "Kubernetes versions to push (repeat or comma-separate; `fke versions` lists them)")
	return cmd
}

func newImageListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the images in fke's registry, by the names pods use",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, err := g.registry()
			if err != nil {
				return err
			}
			entries, err := reg.List(cmd.Context())
			if err != nil {
				return err
			}
			if len(entries) == 0 {
				fmt.Fprintf(g.out, "no images in %s\n", reg.Host)
				return nil
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tDIGEST\tSIZE")
			for _, e := range entries {
				fmt.Fprintf(tw, "%s/%s:%s\t%s\t%s\n", reg.Host, e.Repository, e.Tag, e.Digest, size(e.Size))
			}
			return tw.Flush()
		},
	}
}

func size(b int64) string {
	switch {
	case b == 0:
		return "-"
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
}
