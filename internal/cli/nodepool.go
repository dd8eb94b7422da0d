package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/versions"
)

func newNodePoolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "nodepool",
		Aliases: []string{"nodepools", "np"},
		Short:   "Create, list, scale and delete node pools",
	}
	cmd.AddCommand(newNodePoolCreateCmd(g), newNodePoolListCmd(g), newNodePoolGetCmd(g), newNodePoolScaleCmd(g), newNodePoolDeleteCmd(g))
	return cmd
}

// poolOptions are the flags shared by `nodepool create` and `cluster create --nodepool`.
type poolOptions struct {
	instanceType    string
	provider        string
	replicas        int32
	min, max        int32
	labels          []string
	disableGPUTaint bool
	unneededTime    time.Duration
	priority        int32
	taints          []string
	gpuReplicas     int32
	migStrategy     string
	version         string
}

// splitPoolRef parses CLUSTER/NAME.
func splitPoolRef(ref string) (clusterName, pool string, err error) {
	c, p, ok := strings.Cut(ref, "/")
	if !ok || c == "" || p == "" {
		return "", "", fmt.Errorf("node pool %q must be written CLUSTER/NAME, e.g. demo/gpu", ref)
	}
	if err := validateName("cluster", c); err != nil {
		return "", "", err
	}
	if err := validateName("node pool", p); err != nil {
		return "", "", err
	}
	return c, p, nil
}

// buildPool checks the flags and returns the NodePool they describe.
func buildPool(namespace, clusterName, name string, o poolOptions, replicasSet, minSet, maxSet bool) (*fkev1.NodePool, error) {
	if o.instanceType == "" {
		return nil, fmt.Errorf("--instance-type is required: list them with `fke instancetypes`")
	}
	np := &fkev1.NodePool{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: fkev1.NodePoolObjectName(clusterName, name),
			Labels: map[string]string{fkev1.LabelCluster: clusterName},
		},
		Spec: fkev1.NodePoolSpec{
			ClusterName: clusterName, PoolName: name, InstanceType: o.instanceType,
			Provider: fkev1.ProviderName(o.provider), DisableGPUTaint: o.disableGPUTaint, Version: o.version,
		},
	}
	if o.version != "" {
		if _, err := versions.Parse(o.version); err != nil {
			return nil, fmt.Errorf("--version: %w", err)
		}
	}
	switch o.migStrategy {
	case "", "none", "single", "mixed":
	default:
		return nil, fmt.Errorf("--mig-strategy %q: must be none, single or mixed", o.migStrategy)
	}
	if o.gpuReplicas < 0 || o.gpuReplicas > 64 {
		return nil, fmt.Errorf("--gpu-time-slicing %d: must be 1 to 64 replicas per GPU", o.gpuReplicas)
	}
	if o.gpuReplicas > 0 || o.migStrategy != "" {
		np.Spec.GPU = &fkev1.NodePoolGPU{TimeSlicingReplicas: o.gpuReplicas, MIGStrategy: o.migStrategy}
	}
	switch {
	case replicasSet && (minSet || maxSet):
		return nil, fmt.Errorf("use either --replicas or --min/--max (autoscaling), not both")
	case minSet != maxSet:
		return nil, fmt.Errorf("autoscaling needs both --min and --max")
	case o.unneededTime < 0:
		return nil, fmt.Errorf("the scale-down unneeded time must not be negative (got %s)", o.unneededTime)
	case minSet:
		if o.min < 0 || o.max < 0 {
			return nil, fmt.Errorf("--min and --max must not be negative")
		}
		if o.min > o.max {
			return nil, fmt.Errorf("--min %d is greater than --max %d", o.min, o.max)
		}
		np.Spec.Autoscaling = &fkev1.NodePoolAutoscaling{MinSize: o.min, MaxSize: o.max, Priority: o.priority}
		if o.unneededTime > 0 {
			np.Spec.Autoscaling.ScaleDownUnneededTime = &metav1.Duration{Duration: o.unneededTime}
		}
		np.Spec.Replicas = ptr.To(o.min)
	default:
		if o.replicas < 0 {
			return nil, fmt.Errorf("--replicas must not be negative (got %d)", o.replicas)
		}
		np.Spec.Replicas = ptr.To(o.replicas)
	}
	if len(o.labels) > 0 {
		np.Spec.Labels = map[string]string{}
		for _, kv := range o.labels {
			k, v, err := parseLabel(kv)
			if err != nil {
				return nil, err
			}
			np.Spec.Labels[k] = v
		}
	}
	for _, spec := range o.taints {
		t, err := parseTaint(spec)
		if err != nil {
			return nil, err
		}
		np.Spec.Taints = append(np.Spec.Taints, t)
	}
	return np, nil
}

// parseLabel parses KEY=VALUE (the value may be empty or hold '='). The API
// server checks that the key and value are valid Kubernetes labels.
func parseLabel(kv string) (key, value string, err error) {
	key, value, ok := strings.Cut(kv, "=")
	if !ok || key == "" {
		return "", "", fmt.Errorf("label %q must be KEY=VALUE", kv)
	}
	return key, value, nil
}

// parseTaint parses KEY[=VALUE]:EFFECT as kubectl taint does.
func parseTaint(spec string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(spec, ":")
	t := corev1.Taint{Effect: corev1.TaintEffect(effect)}
	t.Key, t.Value, _ = strings.Cut(kv, "=")
	switch {
	case !ok || t.Key == "":
		return t, fmt.Errorf("taint %q must be KEY[=VALUE]:EFFECT", spec)
	case t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectPreferNoSchedule && t.Effect != corev1.TaintEffectNoExecute:
		return t, fmt.Errorf("taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", spec)
	}
	return t, nil
}

// createPool checks that the cluster and instance type exist, then creates the pool.
func createPool(ctx context.Context, c client.Client, np *fkev1.NodePool) error {
	cl := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: np.Namespace, Name: np.Spec.ClusterName}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found: create it first with `fke cluster create %s`", np.Spec.ClusterName, np.Spec.ClusterName)
		}
		return explain(err, "cluster")
	}
	if !cl.DeletionTimestamp.IsZero() {
		return fmt.Errorf("cluster %q is being deleted", cl.Name)
	}
	it := &fkev1.InstanceType{}
	if err := c.Get(ctx, client.ObjectKey{Name: np.Spec.InstanceType}, it); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("instance type %q not found: list them with `fke instancetypes`", np.Spec.InstanceType)
		}
		return explain(err, "instance type")
	}
	if err := c.Create(ctx, np); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("node pool %s/%s already exists", np.Spec.ClusterName, np.PoolName())
		}
		return explain(err, "node pool "+np.Spec.ClusterName+"/"+np.PoolName())
	}
	return nil
}

func addPoolFlags(cmd *cobra.Command, o *poolOptions) {
	cmd.Flags().StringVarP(&o.instanceType, "instance-type", "t", "", "instance type of the nodes (see `fke instancetypes`)")
	cmd.Flags().StringVar(&o.provider, "provider", string(fkev1.ProviderKwok), "node provider: kwok (simulated nodes) or local (real nodes on this machine; see fke doctor)")
	cmd.Flags().Int32Var(&o.replicas, "replicas", 1, "number of nodes (fixed size)")
	cmd.Flags().Int32Var(&o.min, "min", 0, "autoscaling: fewest nodes (0 allows scale to zero)")
	cmd.Flags().Int32Var(&o.max, "max", 0, "autoscaling: most nodes")
	cmd.Flags().StringSliceVar(&o.labels, "label", nil, "node label KEY=VALUE (repeatable)")
	cmd.Flags().StringSliceVar(&o.taints, "taint", nil, "node taint KEY[=VALUE]:EFFECT (repeatable)")
	cmd.Flags().BoolVar(&o.disableGPUTaint, "no-gpu-taint", false, "do not taint GPU nodes with nvidia.com/gpu=present:NoSchedule")
	cmd.Flags().DurationVar(&o.unneededTime, "scale-down-unneeded-time", 0, "autoscaling: how long a node must be unneeded before removal (default 10m)")
	cmd.Flags().Int32Var(&o.priority, "priority", 0, "autoscaling: rank for the priority expander (higher wins)")
	cmd.Flags().Int32Var(&o.gpuReplicas, "gpu-time-slicing", 0, "GPU types: advertise each GPU this many times (time-slicing; pods share it)")
	cmd.Flags().StringVar(&o.migStrategy, "mig-strategy", "", "GPU types: how MIG devices are advertised: none, single or mixed")
	cmd.Flags().StringVar(&o.version, "version", "", "pin the nodes' Kubernetes version (default: follow the cluster; see `fke versions`)")
}

func newNodePoolCreateCmd(g *globals) *cobra.Command {
	var o poolOptions
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "create CLUSTER/NAME --instance-type TYPE (--replicas N | --min A --max B)",
		Short: "Create a node pool",
		Args:  exactArgs(1, "CLUSTER/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			clusterName, name, err := splitPoolRef(args[0])
			if err != nil {
				return err
			}
			f := cmd.Flags()
			np, err := buildPool(g.namespace, clusterName, name, o, f.Changed("replicas"), f.Changed("min"), f.Changed("max"))
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := createPool(cmd.Context(), c, np); err != nil {
				return err
			}
			fmt.Fprintf(g.out, "node pool %s/%s created\n", clusterName, name)
			if wait {
				return waitPoolReady(cmd.Context(), c, client.ObjectKeyFromObject(np), timeout, g.out)
			}
			return nil
		},
	}
	addPoolFlags(cmd, &o)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every node is ready")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd
}

func waitPoolReady(ctx context.Context, c client.Client, key client.ObjectKey, timeout time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		np := &fkev1.NodePool{}
		if err := c.Get(ctx, key, np); err == nil {
			msg := fmt.Sprintf("%d/%d nodes ready", np.Status.ReadyReplicas, np.Status.DesiredReplicas)
			if msg != last {
				fmt.Fprintf(out, "  %s\n", msg)
				last = msg
			}
			if np.Status.ObservedGeneration == np.Generation && np.Status.ReadyReplicas == np.Status.DesiredReplicas &&
				np.Status.Replicas == np.Status.DesiredReplicas && conditionStatus(np.Status.Conditions, fkev1.ConditionReady) == "True" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node pool %s not ready after %s (%s)", poolRef(key.Name), timeout, last)
		case <-tick.C:
		}
	}
}

func newNodePoolListCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list [CLUSTER]",
		Aliases: []string{"ls"},
		Short:   "List node pools (of one cluster, or all)",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var list fkev1.NodePoolList
			if err := c.List(cmd.Context(), &list, client.InNamespace(g.namespace)); err != nil {
				return explain(err, "node pools")
			}
			if len(args) == 1 {
				var keep []fkev1.NodePool
				for _, np := range list.Items {
					if np.Spec.ClusterName == args[0] {
						keep = append(keep, np)
					}
				}
				list.Items = keep
			}
			if output != "" {
				return printObject(g.out, output, &list)
			}
			return printPools(g.out, list.Items, true)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

func printPools(out io.Writer, pools []fkev1.NodePool, withCluster bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if withCluster {
		fmt.Fprint(tw, "CLUSTER\t")
	}
	fmt.Fprintln(tw, "NAME\tTYPE\tPROVIDER\tNODES\tREADY\tMIN\tMAX\tGPUS\tGPUS USED\tSTATUS")
	for _, np := range pools {
		minS, maxS := "-", "-"
		if a := np.Spec.Autoscaling; a != nil {
			minS, maxS = strconv.Itoa(int(a.MinSize)), strconv.Itoa(int(a.MaxSize))
		}
		if withCluster {
			fmt.Fprintf(tw, "%s\t", np.Spec.ClusterName)
		}
		status := "-"
		for _, c := range np.Status.Conditions {
			if c.Type == fkev1.ConditionReady {
				status = c.Reason
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%d\t%d\t%s\n", np.PoolName(), np.Spec.InstanceType, np.Spec.Provider,
			np.Status.Replicas, np.Status.DesiredReplicas, np.Status.ReadyReplicas, minS, maxS, np.Status.GPUCapacity, np.Status.GPUAllocated, status)
	}
	return tw.Flush()
}

func getPool(ctx context.Context, c client.Client, namespace, ref string) (*fkev1.NodePool, error) {
	clusterName, name, err := splitPoolRef(ref)
	if err != nil {
		return nil, err
	}
	np := &fkev1.NodePool{}
	err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fkev1.NodePoolObjectName(clusterName, name)}, np)
	if apierrors.IsNotFound(err) {
		// A pool made before per-cluster names, not renamed yet.
		if lerr := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, np); lerr == nil && np.Legacy() && np.Spec.ClusterName == clusterName {
			return np, nil
		}
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("node pool %s not found: list them with `fke nodepool list %s`", ref, clusterName)
		}
		return nil, explain(err, "node pool")
	}
	return np, nil
}

// poolRef writes a pool's object name CLUSTER.POOL as users write it, CLUSTER/POOL.
func poolRef(objectName string) string {
	c, p, ok := strings.Cut(objectName, ".")
	if !ok {
		return objectName
	}
	return c + "/" + p
}

func newNodePoolGetCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get CLUSTER/NAME",
		Short: "Show a node pool, its machines and events",
		Args:  exactArgs(1, "CLUSTER/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			np, err := getPool(cmd.Context(), c, g.namespace, args[0])
			if err != nil {
				return err
			}
			if output != "" {
				return printObject(g.out, output, np)
			}
			if err := printPools(g.out, []fkev1.NodePool{*np}, true); err != nil {
				return err
			}
			if d := np.Status.LastScaleDecision; d != nil {
				fmt.Fprintf(g.out, "\nLast scale decision: %d → %d (%s ago): %s\n", d.From, d.To, age(d.Time), d.Reason)
			}
			fmt.Fprintln(g.out, "\nConditions:")
			for _, cond := range np.Status.Conditions {
				fmt.Fprintf(g.out, "  %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
			fmt.Fprintln(g.out)
			machines, err := printMachines(cmd.Context(), c, np.Namespace, client.MatchingLabels(np.MachineSelector()), g.out)
			if err != nil {
				return err
			}
			objects := []object{{"NodePool", np.Name}}
			for _, m := range machines {
				objects = append(objects, object{"Machine", m})
			}
			return printEvents(cmd.Context(), c, np.Namespace, g.out, objects...)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

// printMachines prints the machines of sel, then why each failed machine
// failed, and returns their names.
func printMachines(ctx context.Context, c client.Client, namespace string, sel client.MatchingLabels, out io.Writer) ([]string, error) {
	var ms fkev1.MachineList
	if err := c.List(ctx, &ms, client.InNamespace(namespace), sel); err != nil {
		return nil, explain(err, "machines")
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MACHINE\tPOOL\tNODE\tPHASE\tGPUS\tREADY\tAGE")
	var names, failed []string
	for _, m := range ms.Items {
		names = append(names, m.Name)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Name, m.Spec.NodePoolName, orDash(m.Status.NodeName), orDash(string(m.Status.Phase)),
			m.Status.GPUAllocatable, conditionStatus(m.Status.Conditions, fkev1.ConditionReady), age(m.CreationTimestamp))
		if cond := meta.FindStatusCondition(m.Status.Conditions, fkev1.ConditionReady); m.Status.Phase == fkev1.MachineFailed && cond != nil {
			failed = append(failed, fmt.Sprintf("  %s: %s: %s", m.Name, cond.Reason, cond.Message))
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	if len(failed) > 0 {
		fmt.Fprintf(out, "\nFailed machines:\n%s\n", strings.Join(failed, "\n"))
	}
	return names, nil
}

func newNodePoolScaleCmd(g *globals) *cobra.Command {
	var replicas int32
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "scale CLUSTER/NAME --replicas N",
		Short: "Set the number of nodes of a pool",
		Args:  exactArgs(1, "CLUSTER/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("replicas") {
				return fmt.Errorf("--replicas is required")
			}
			if replicas < 0 {
				return fmt.Errorf("--replicas must not be negative (got %d)", replicas)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			np, err := getPool(cmd.Context(), c, g.namespace, args[0])
			if err != nil {
				return err
			}
			if a := np.Spec.Autoscaling; a != nil && (replicas < a.MinSize || replicas > a.MaxSize) {
				return fmt.Errorf("--replicas %d is outside the pool's autoscaling range %d..%d", replicas, a.MinSize, a.MaxSize)
			}
			before := np.DeepCopy()
			np.Spec.Replicas = ptr.To(replicas)
			if err := c.Patch(cmd.Context(), np, client.MergeFrom(before)); err != nil {
				return explain(err, "node pool")
			}
			fmt.Fprintf(g.out, "node pool %s scaled to %d\n", args[0], replicas)
			if wait {
				return waitPoolReady(cmd.Context(), c, client.ObjectKeyFromObject(np), timeout, g.out)
			}
			return nil
		},
	}
	cmd.Flags().Int32Var(&replicas, "replicas", 0, "number of nodes")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the pool has that many ready nodes")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd
}

func newNodePoolDeleteCmd(g *globals) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "delete CLUSTER/NAME",
		Short: "Delete a node pool and its nodes (drained first)",
		Args:  exactArgs(1, "CLUSTER/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			np, err := getPool(cmd.Context(), c, g.namespace, args[0])
			if err != nil {
				return err
			}
			if err := c.Delete(cmd.Context(), np); err != nil {
				return explain(err, "node pool")
			}
			if !wait {
				fmt.Fprintf(g.out, "node pool %s is being deleted\n", args[0])
				return nil
			}
			if err := waitGone(cmd.Context(), c, np, timeout); err != nil {
				return fmt.Errorf("node pool %s still exists after %s", args[0], timeout)
			}
			fmt.Fprintf(g.out, "node pool %s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the pool and its nodes are gone")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd
}

func newInstanceTypesCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "instancetypes",
		Aliases: []string{"instancetype", "it"},
		Short:   "List the instance types node pools can use",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var list fkev1.InstanceTypeList
			if err := c.List(cmd.Context(), &list); err != nil {
				return explain(err, "instance types")
			}
			if output != "" {
				return printObject(g.out, output, &list)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tCPU\tMEMORY\tGPUS\tGPU\tGPU MEMORY\tMIG\tPRICE/H")
			for _, it := range list.Items {
				gpus, product, mem, mig := "0", "-", "-", "-"
				if gp := it.Spec.GPU; gp != nil {
					gpus, product, mem = strconv.Itoa(int(gp.Count)), gp.Product, strconv.FormatInt(gp.MemoryMiB, 10)+" MiB"
					if len(gp.MIGProfiles) > 0 {
						mig = "yes"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.Name, it.Spec.CPU.String(), it.Spec.Memory.String(), gpus, product, mem, mig, orDash(it.Spec.PricePerHour))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}
