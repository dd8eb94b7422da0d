package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cluster",
		Aliases: []string{"clusters"},
		Short:   "Create, list, inspect and delete tenant clusters",
	}
	cmd.AddCommand(newClusterCreateCmd(g), newClusterListCmd(g), newClusterGetCmd(g), newClusterDeleteCmd(g),
		newClusterUpgradeCmd(g), newClusterBackupCmd(g), newClusterBackupsCmd(g), newClusterRestoreCmd(g))
	return cmd
}

// validateName checks a cluster or pool name before anything is sent.
func validateName(kind, name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 || len(name) > 40 || (name != "" && (name[0] < 'a' || name[0] > 'z')) {
		return fmt.Errorf("invalid %s name %q: use at most 40 lowercase letters, digits and '-', starting with a letter", kind, name)
	}
	return nil
}

func newClusterCreateCmd(g *globals) *cobra.Command {
	var (
		version    string
		wait       bool
		timeout    time.Duration
		pools      []string
		expander   string
		metrics    bool
		gpuMetrics bool
		vpa        bool
		auto       string
		window     string

		podCIDR, serviceCIDR string
	)
	cmd := &cobra.Command{
		Use:   "create NAME [--nodepool name=gpu,type=gpu-h100x8,replicas=2]",
		Short: "Create a tenant cluster with its own control plane",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validateName("cluster", name); err != nil {
				return err
			}
			var nps []*fkev1.NodePool
			seen := map[string]bool{}
			for _, spec := range pools {
				np, err := parsePoolShortcut(g.namespace, name, spec)
				if err != nil {
					return err
				}
				if seen[np.PoolName()] {
					return fmt.Errorf("--nodepool: pool %q is given twice", np.PoolName())
				}
				seen[np.PoolName()] = true
				nps = append(nps, np)
			}
			mw, err := parseMaintenance(window)
			if err != nil {
				return err
			}
			switch fkev1.AutoUpgradePolicy(auto) {
			case fkev1.AutoUpgradeNone, fkev1.AutoUpgradePatch, fkev1.AutoUpgradeMinor:
			default:
				return fmt.Errorf("--auto-upgrade %q: use none, patch or minor", auto)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, np := range nps {
				it := &fkev1.InstanceType{}
				if err := c.Get(cmd.Context(), client.ObjectKey{Name: np.Spec.InstanceType}, it); err != nil {
					return fmt.Errorf("node pool %s: instance type %q not found: list them with `fke instancetypes`", np.PoolName(), np.Spec.InstanceType)
				}
			}
			cl := &fkev1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: name},
				Spec: fkev1.ClusterSpec{
					Version:     version,
					Network:     fkev1.ClusterNetwork{PodCIDR: podCIDR, ServiceCIDR: serviceCIDR},
					Autoscaling: fkev1.ClusterAutoscaling{Expander: fkev1.Expander(expander)},
					Addons: fkev1.ClusterAddons{MetricsServer: fkev1.MetricsServerAddon{Enabled: &metrics},
						GPUMetrics:            fkev1.GPUMetricsAddon{Enabled: &gpuMetrics},
						VerticalPodAutoscaler: fkev1.VerticalPodAutoscalerAddon{Enabled: vpa}},
					AutoUpgrade: fkev1.AutoUpgradePolicy(auto),
					Maintenance: mw,
				},
			}
			if err := c.Create(cmd.Context(), cl); err != nil {
				return explainCluster(err, name)
			}
			fmt.Fprintf(g.out, "cluster %s created\n", name)
			if err := createPools(cmd.Context(), c, cl, nps, g.out); err != nil {
				return err
			}
			if !wait {
				fmt.Fprintf(g.out, "watch it with `fke cluster get %s`\n", name)
				return nil
			}
			if err := waitClusterReady(cmd.Context(), c, client.ObjectKeyFromObject(cl), timeout, g.out); err != nil {
				return err
			}
			for _, np := range nps {
				if err := waitPoolReady(cmd.Context(), c, client.ObjectKeyFromObject(np), timeout, g.out); err != nil {
					return err
				}
			}
			fmt.Fprintf(g.out, "cluster %s is ready; get its kubeconfig with `fke kubeconfig %s`\n", name, name)
			return nil
		},
	}
	cmd.Flags().StringVar(&version, "version", versions.Default, "Kubernetes version of the control plane (`fke versions` lists them)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the cluster (and its node pools) are Ready")
	cmd.Flags().BoolVar(&vpa, "vertical-pod-autoscaler", false, "run the upstream Vertical Pod Autoscaler (recommender, updater, admission controller) for the cluster")
	cmd.Flags().BoolVar(&metrics, "metrics-server", true, "run metrics-server for the cluster (kubectl top, HPAs on CPU and memory); --metrics-server=false to leave it out")
	cmd.Flags().BoolVar(&gpuMetrics, "gpu-metrics", true, "run the GPU metrics adapter for the cluster (custom.metrics.k8s.io: HPAs on DCGM_FI_DEV_GPU_UTIL, ...); --gpu-metrics=false to leave it out")
	cmd.Flags().StringVar(&expander, "expander", string(fkev1.ExpanderLeastWaste), "node autoscaler expander: least-waste, price, priority or random")
	cmd.Flags().StringArrayVar(&pools, "nodepool", nil, "add a node pool: name=N,type=T,replicas=R or name=N,type=T,min=A,max=B (repeatable)")
	cmd.Flags().StringVar(&auto, "auto-upgrade", string(fkev1.AutoUpgradeNone), "upgrades fke starts on its own inside the maintenance window: none, patch or minor")
	cmd.Flags().StringVar(&window, "maintenance", "", "maintenance window in UTC: START/DURATION[/DAYS], e.g. 22:00/4h or 03:00/2h/Sat,Sun")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	cmd.Flags().StringVar(&podCIDR, "pod-cidr", "", "pod range, /20 or larger (default: a free /14 that overlaps no host route or other cluster)")
	cmd.Flags().StringVar(&serviceCIDR, "service-cidr", "", "Service range, /12 or smaller (default 10.96.0.0/16)")
	return cmd
}

// parseMaintenance reads START/DURATION[/DAYS] (UTC), e.g. 22:00/4h or
// 03:00/2h/Sat,Sun; "" is no window.
func parseMaintenance(s string) (*fkev1.MaintenanceWindow, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("--maintenance %q: write START/DURATION[/DAYS], e.g. 22:00/4h or 03:00/2h/Sat,Sun", s)
	}
	var h, m int
	if n, err := fmt.Sscanf(parts[0], "%d:%d", &h, &m); err != nil || n != 2 || h > 23 || m > 59 || len(parts[0]) != 5 {
		return nil, fmt.Errorf("--maintenance %q: start %q must be HH:MM in UTC, e.g. 22:00", s, parts[0])
	}
	d, err := time.ParseDuration(parts[1])
	if err != nil || d < 30*time.Minute || d > 24*time.Hour {
		return nil, fmt.Errorf("--maintenance %q: duration %q must be between 30m and 24h, e.g. 4h", s, parts[1])
	}
	w := &fkev1.MaintenanceWindow{Start: parts[0], Duration: metav1.Duration{Duration: d}}
	if len(parts) == 3 {
		for _, day := range strings.Split(parts[2], ",") {
			if !slices.Contains([]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}, day) {
				return nil, fmt.Errorf("--maintenance %q: day %q must be one of Mon, Tue, Wed, Thu, Fri, Sat, Sun", s, day)
			}
			w.Days = append(w.Days, fkev1.Weekday(day))
		}
	}
	return w, nil
}

// createPools creates the pools of a cluster just created. It is all or
// nothing from the user's view: when one pool is refused, the pools made
// so far and the cluster are deleted again, and the error says so.
func createPools(ctx context.Context, c client.Client, cl *fkev1.Cluster, nps []*fkev1.NodePool, out io.Writer) error {
	var made []*fkev1.NodePool
	for _, np := range nps {
		err := createPool(ctx, c, np)
		if err == nil {
			made = append(made, np)
			fmt.Fprintf(out, "node pool %s/%s created\n", cl.Name, np.PoolName())
			continue
		}
		var undo []error
		for _, m := range made {
			if derr := c.Delete(ctx, m); client.IgnoreNotFound(derr) != nil {
				undo = append(undo, fmt.Errorf("node pool %s/%s: %w", cl.Name, m.PoolName(), derr))
			}
		}
		if derr := c.Delete(ctx, cl); client.IgnoreNotFound(derr) != nil {
			undo = append(undo, fmt.Errorf("cluster %s: %w", cl.Name, derr))
		}
		if len(undo) > 0 {
			return fmt.Errorf("%w; removing what was created failed, delete it with `fke cluster delete %s`: %w", err, cl.Name, errors.Join(undo...))
		}
		return fmt.Errorf("%w; nothing was kept: cluster %s and its other node pools are being deleted", err, cl.Name)
	}
	return nil
}

// waitGone polls until obj no longer exists or timeout passes.
func waitGone(ctx context.Context, c client.Client, obj client.Object, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	key := client.ObjectKeyFromObject(obj)
	for {
		probe := obj.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, key, probe); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitClusterReady polls until Ready, printing each new condition message.
func waitClusterReady(ctx context.Context, c client.Client, key client.ObjectKey, timeout time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		cl := &fkev1.Cluster{}
		if err := c.Get(ctx, key, cl); err != nil && ctx.Err() == nil {
			return explainCluster(err, key.Name)
		}
		if cond := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionReady); cond != nil {
			if cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == cl.Generation {
				return nil
			}
			if cond.Message != last {
				fmt.Fprintf(out, "  %s: %s\n", cond.Reason, cond.Message)
				last = cond.Message
			}
			if cl.Status.Phase == "Failed" {
				return fmt.Errorf("cluster %s failed: %s", key.Name, cond.Message)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s was not ready after %s (last: %s); see `fke cluster get %s`", key.Name, timeout, last, key.Name)
		case <-tick.C:
		}
	}
}

func newClusterListCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List tenant clusters",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var list fkev1.ClusterList
			if err := c.List(cmd.Context(), &list, client.InNamespace(g.namespace)); err != nil {
				return explain(err, "clusters")
			}
			if output != "" {
				return printObject(g.out, output, &list)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tPHASE\tREADY\tENDPOINT\tAGE")
			for _, cl := range list.Items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cl.Name, cl.Spec.Version, orDash(cl.Status.Phase),
					conditionStatus(cl.Status.Conditions, fkev1.ConditionReady), orDash(cl.Status.Endpoint), age(cl.CreationTimestamp))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

// getCluster reads cluster name of the current namespace; a miss is
// explained (explainCluster).
func (g *globals) getCluster(ctx context.Context, c client.Client, name string) (*fkev1.Cluster, error) {
	cl := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: g.namespace, Name: name}, cl); err != nil {
		return nil, explainCluster(err, name)
	}
	return cl, nil
}

func newClusterGetCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a tenant cluster: control plane, conditions and events",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			cl, err := g.getCluster(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if output != "" {
				return printObject(g.out, output, cl)
			}
			return describeCluster(cmd.Context(), c, cl, g.out)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

func describeCluster(ctx context.Context, c client.Client, cl *fkev1.Cluster, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Name:\t%s\n", cl.Name)
	fmt.Fprintf(tw, "Namespace:\t%s\n", cl.Namespace)
	fmt.Fprintf(tw, "Version:\t%s (reported: %s)\n", cl.Spec.Version, orDash(cl.Status.Version))
	if len(cl.Status.ControlPlane) > 0 {
		fmt.Fprintf(tw, "Components:\t%s\n", componentSummary(cl.Status.ControlPlane))
	}
	if up := cl.Status.Upgrade; up != nil {
		state := "step " + up.Step
		if up.CompletionTime != nil {
			state = "done in " + up.CompletionTime.Sub(up.StartTime.Time).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(tw, "Upgrade:\t%s → %s, %s (snapshot %s)\n", up.From, up.To, state, orDash(up.Snapshot))
	}
	fmt.Fprintf(tw, "Runtime:\t%s\n", cl.Spec.Runtime)
	fmt.Fprintf(tw, "Phase:\t%s\n", orDash(cl.Status.Phase))
	fmt.Fprintf(tw, "Endpoint:\t%s\n", orDash(cl.Status.Endpoint))
	fmt.Fprintf(tw, "Kubeconfig:\tSecret %s (fke kubeconfig %s)\n", orDash(cl.Status.KubeconfigSecret), cl.Name)
	fmt.Fprintf(tw, "Networks:\tpods %s, services %s\n", cl.Spec.Network.PodCIDR, cl.Spec.Network.ServiceCIDR)
	fmt.Fprintf(tw, "Age:\t%s\n", age(cl.CreationTimestamp))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nConditions:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, cond := range cl.Status.Conditions {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printAddons(out, cl); err != nil {
		return err
	}
	var pools fkev1.NodePoolList
	if err := c.List(ctx, &pools, client.InNamespace(cl.Namespace)); err == nil {
		var mine []fkev1.NodePool
		for _, np := range pools.Items {
			if np.Spec.ClusterName == cl.Name {
				mine = append(mine, np)
			}
		}
		fmt.Fprintln(out, "\nNode pools:")
		if len(mine) == 0 {
			fmt.Fprintln(out, "  <none>: add one with `fke nodepool create "+cl.Name+"/NAME --instance-type TYPE`")
		} else {
			var capacity, used int64
			for _, np := range mine {
				capacity += np.Status.GPUCapacity
				used += np.Status.GPUAllocated
			}
			if err := printPools(out, mine, false); err != nil {
				return err
			}
			fmt.Fprintf(out, "GPUs: %d allocatable, %d allocated to pods\n\n", capacity, used)
			if _, err := printMachines(ctx, c, cl.Namespace, client.MatchingLabels{fkev1.LabelCluster: cl.Name}, out); err != nil {
				return err
			}
		}
	}
	return printEvents(ctx, c, cl.Namespace, out, object{"Cluster", cl.Name})
}

// parsePoolShortcut parses name=gpu,type=gpu-h100x8,replicas=2 (or min=,max=).
func parsePoolShortcut(namespace, clusterName, spec string) (*fkev1.NodePool, error) {
	var o poolOptions
	var name string
	var replicasSet, minSet, maxSet bool
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--nodepool %q: %q must be KEY=VALUE", spec, part)
		}
		num := func() (int32, error) {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return 0, fmt.Errorf("--nodepool %q: %s must be a number", spec, k)
			}
			return int32(n), nil
		}
		var err error
		switch k {
		case "name":
			name = v
		case "type", "instance-type":
			o.instanceType = v
		case "provider":
			o.provider = v
		case "replicas":
			o.replicas, err = num()
			replicasSet = true
		case "min":
			o.min, err = num()
			minSet = true
		case "max":
			o.max, err = num()
			maxSet = true
		case "unneeded":
			o.unneededTime, err = time.ParseDuration(v)
		default:
			return nil, fmt.Errorf("--nodepool %q: unknown key %q (use name, type, replicas, min, max, unneeded, provider)", spec, k)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := validateName("node pool", name); err != nil {
		return nil, fmt.Errorf("--nodepool %q: %w", spec, err)
	}
	if o.provider == "" {
		o.provider = string(fkev1.ProviderKwok)
	}
	if !replicasSet && !minSet && !maxSet {
		o.replicas, replicasSet = 1, true
	}
	return buildPool(namespace, clusterName, name, o, replicasSet, minSet, maxSet)
}

func newClusterDeleteCmd(g *globals) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a tenant cluster, its control plane and its data",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			cl, err := g.getCluster(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if err := c.Delete(cmd.Context(), cl); err != nil {
				return explainCluster(err, args[0])
			}
			if !wait {
				fmt.Fprintf(g.out, "cluster %s is being deleted\n", args[0])
				return nil
			}
			if err := waitGone(cmd.Context(), c, cl, timeout); err != nil {
				return fmt.Errorf("cluster %s still exists after %s; see `fke cluster get %s`", args[0], timeout, args[0])
			}
			fmt.Fprintf(g.out, "cluster %s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the cluster is gone")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long --wait waits")
	return cmd
}

func explainCluster(err error, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster %q not found: list clusters with `fke cluster list`", name)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster %q already exists: see `fke cluster get %s`", name, name)
	}
	return explain(err, "cluster "+name)
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s needs %s (got %d arguments): %s", cmd.CommandPath(), names, len(args), cmd.UseLine())
		}
		return nil
	}
}
