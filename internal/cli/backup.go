package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/backup"
	"fke.dev/fke/internal/clusterbackup"
)

func newClusterBackupCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Take an etcd snapshot of a cluster now and wait for it",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			key := client.ObjectKey{Namespace: g.namespace, Name: args[0]}
			cl, err := g.getCluster(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			request := strconv.FormatInt(time.Now().UnixNano(), 10)
			patch := client.MergeFrom(cl.DeepCopy())
			if cl.Annotations == nil {
				cl.Annotations = map[string]string{}
			}
			cl.Annotations[fkev1.AnnotationBackupRequested] = request
			if err := c.Patch(cmd.Context(), cl, patch); err != nil {
				return explainCluster(err, args[0])
			}
			fmt.Fprintf(g.errOut, "snapshot of %s requested; waiting\n", args[0])
			var cond string
			err = wait.PollUntilContextTimeout(cmd.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
				if err := c.Get(ctx, key, cl); err != nil {
					return false, err
				}
				if cl.Status.BackupRequest != request {
					return false, nil
				}
				c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionBackupSucceeded)
				if c == nil {
					return false, nil
				}
				cond = c.Message
				if c.Status != "True" {
					return false, fmt.Errorf("snapshot of %s failed: %s", args[0], c.Message)
				}
				return true, nil
			})
			if err != nil {
				if cond == "" {
					return fmt.Errorf("no snapshot of %s after %s (is its control plane ready? see `fke cluster get %s`): %w", args[0], timeout, args[0], err)
				}
				return err
			}
			fmt.Fprintln(g.out, cond)
			if b := cl.Spec.Backup; b == nil || b.S3 == nil {
				return nil
			}
			// Set with the snapshot, in the same status update.
			up := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionBackupUploaded)
			switch {
			case up == nil:
				return fmt.Errorf("the snapshot was taken, but fke-manager did not say whether it reached the S3 store (see `fke cluster get %s`)", args[0])
			case up.Status != metav1.ConditionTrue:
				return fmt.Errorf("%s", up.Message)
			}
			fmt.Fprintln(g.out, up.Message)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the snapshot")
	return cmd
}

func newClusterBackupsCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "backups NAME",
		Short: "List a cluster's etcd snapshots",
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
				return printObject(g.out, output, cl.Status.Backups)
			}
			if len(cl.Status.Backups) == 0 {
				fmt.Fprintf(g.out, "no snapshots of %s: take one with `fke cluster backup %s`, or schedule them in spec.backup\n", args[0], args[0])
				return nil
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SNAPSHOT\tTAKEN\tSIZE\tREVISION\tSHA256\tWHERE")
			for _, b := range cl.Status.Backups {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", b.Name, b.Time.UTC().Format(time.RFC3339), humanBytes(b.Size), b.Revision, b.SHA256[:min(16, len(b.SHA256))], backupWhere(b.Locations))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionBackupUploaded); c != nil && c.Status != metav1.ConditionTrue {
				fmt.Fprintf(g.errOut, "warning: %s\n", c.Message)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

// backupWhere is the WHERE column: local, s3 (spec.backup.s3), or both.
func backupWhere(locs []fkev1.BackupLocation) string {
	if len(locs) == 0 {
		return string(fkev1.BackupLocal) // recorded before snapshots had locations
	}
	var out []string
	for _, l := range locs {
		out = append(out, string(l))
	}
	return strings.Join(out, ",")
}

// humanBytes writes n in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	const k = 1024
	switch {
	case n < k:
		return fmt.Sprintf("%d B", n)
	case n < k*k:
		return fmt.Sprintf("%.1f KiB", float64(n)/k)
	case n < k*k*k:
		return fmt.Sprintf("%.1f MiB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(k*k*k))
}

// deletedSource describes a deleted cluster from the restore-keys Secret
// its last snapshot left (the newest, when a name was reused): its
// version and Service range, which a cluster restored from it keeps.
func deletedSource(ctx context.Context, c client.Client, namespace, name string) (*fkev1.Cluster, error) {
	var keys corev1.SecretList
	if err := c.List(ctx, &keys, client.InNamespace(namespace), client.MatchingLabels{fkev1.LabelCluster: name}); err != nil {
		return nil, fmt.Errorf("looking for the snapshots of %s: %w", name, err)
	}
	var newest *corev1.Secret
	for i := range keys.Items {
		k := &keys.Items[i]
		if !strings.HasPrefix(k.Name, backup.KeysSecretName("")) {
			continue
		}
		if newest == nil || k.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = k
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("cluster %q not found, and no snapshot of a deleted cluster of that name is kept (list clusters with `fke cluster list`)", name)
	}
	src := &fkev1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	src.Spec.Version = newest.Annotations[clusterbackup.AnnotationKeysVersion]
	src.Spec.Network.ServiceCIDR = newest.Annotations[clusterbackup.AnnotationKeysServiceCIDR]
	src.Spec.Runtime = fkev1.RuntimeLocal
	return src, nil
}

func newClusterRestoreCmd(g *globals) *cobra.Command {
	var (
		from         string
		wait         bool
		inPlace, yes bool
		timeout      time.Duration
		rtName, ds   string
	)
	cmd := &cobra.Command{
		Use:   "restore NEW --from CLUSTER/SNAPSHOT | restore NAME --from NAME/SNAPSHOT --in-place --yes",
		Short: "Create a cluster from an etcd snapshot of another one (same CA and keys, the snapshot's objects), or restore a cluster in place",
		Args:  exactArgs(1, "NEW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validateName("cluster", name); err != nil {
				return err
			}
			srcName, snapshot, ok := strings.Cut(from, "/")
			if !ok || srcName == "" || snapshot == "" {
				return fmt.Errorf("--from %q: write CLUSTER/SNAPSHOT, e.g. demo/20261201T120000Z (see `fke cluster backups CLUSTER`)", from)
			}
			if inPlace && srcName != name {
				return fmt.Errorf("--in-place restores a cluster from its own snapshots: --from %s/%s names another cluster", srcName, snapshot)
			}
			if inPlace && (rtName != "" || ds != "") {
				return fmt.Errorf("--runtime and --datastore choose where a new cluster runs: a cluster restored in place keeps its own")
			}
			if inPlace && !yes {
				return fmt.Errorf("restoring %s in place replaces every object it holds with those of snapshot %s (its control plane restarts; the data replaced is kept beside it): add --yes to confirm", name, snapshot)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			src, err := g.getCluster(cmd.Context(), c, srcName)
			switch {
			case err == nil:
				found := false
				var names []string
				for _, b := range src.Status.Backups {
					names = append(names, b.Name)
					found = found || b.Name == snapshot
				}
				if !found {
					return fmt.Errorf("cluster %s has no snapshot %s (it has: %s)", srcName, snapshot, orDash(strings.Join(names, ", ")))
				}
			case inPlace:
				return err
			default:
				// A deleted cluster: its snapshots and the keys that open
				// them outlive it (the manager checks the snapshot).
				src, err = deletedSource(cmd.Context(), c, g.namespace, srcName)
				if err != nil {
					return err
				}
			}
			if inPlace {
				return restoreInPlace(cmd.Context(), g, c, src, snapshot, timeout)
			}
			cl := &fkev1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: name},
				Spec: fkev1.ClusterSpec{
					// The restored Services keep their ClusterIPs: the
					// service range must be the source's.
					Version:     src.Spec.Version,
					Runtime:     src.Spec.Runtime,
					Datastore:   src.Spec.Datastore,
					Network:     fkev1.ClusterNetwork{ServiceCIDR: src.Spec.Network.ServiceCIDR},
					Autoscaling: src.Spec.Autoscaling,
					RestoreFrom: &fkev1.ClusterRestore{Cluster: srcName, Snapshot: snapshot},
				},
			}
			if cl.Spec.Runtime, cl.Spec.Datastore, err = restoreTarget(src.Spec, rtName, ds); err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), cl); err != nil {
				return explainCluster(err, name)
			}
			fmt.Fprintf(g.out, "cluster %s created from snapshot %s of %s\n", name, snapshot, srcName)
			if !wait {
				fmt.Fprintf(g.out, "watch it with `fke cluster get %s`\n", name)
				return nil
			}
			return waitClusterReady(cmd.Context(), c, client.ObjectKeyFromObject(cl), timeout, g.out)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the snapshot: CLUSTER/SNAPSHOT (see `fke cluster backups CLUSTER`)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the cluster is Ready")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait (and --in-place) waits")
	cmd.Flags().BoolVar(&inPlace, "in-place", false, "replace the objects of cluster NAME with one of its own snapshots")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm --in-place")
	cmd.Flags().StringVar(&rtName, "runtime", "", "where the new cluster's control plane runs (local, hosted; default: the source's); a snapshot of a local cluster restores into a hosted one")
	cmd.Flags().StringVar(&ds, "datastore", "", "the new cluster's datastore on the hosted runtime (dedicated, shared; default: the source's)")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

// restoreTarget is where a cluster restored from a snapshot of src runs:
// the runtime and datastore asked for (empty: the source's), checked.
func restoreTarget(src fkev1.ClusterSpec, rt, ds string) (fkev1.ControlPlaneRuntime, fkev1.Datastore, error) {
	runtime, datastore := src.Runtime, src.Datastore
	if runtime == "" {
		runtime = fkev1.RuntimeLocal
	}
	if rt != "" {
		runtime = fkev1.ControlPlaneRuntime(rt)
	}
	if ds != "" {
		datastore = fkev1.Datastore(ds)
	}
	switch {
	case runtime != fkev1.RuntimeLocal && runtime != fkev1.RuntimeHosted:
		return "", "", fmt.Errorf("--runtime %q: use %s or %s", rt, fkev1.RuntimeLocal, fkev1.RuntimeHosted)
	case datastore != "" && datastore != fkev1.DatastoreDedicated && datastore != fkev1.DatastoreShared:
		return "", "", fmt.Errorf("--datastore %q: use %s or %s", ds, fkev1.DatastoreDedicated, fkev1.DatastoreShared)
	case src.Runtime == fkev1.RuntimeHosted && runtime == fkev1.RuntimeLocal:
		return "", "", errors.New("a snapshot of a hosted cluster (a key export) restores into a hosted cluster only: leave out --runtime, or use --runtime hosted")
	case runtime == fkev1.RuntimeLocal && datastore == fkev1.DatastoreShared:
		return "", "", errors.New("--datastore shared needs --runtime hosted: a local cluster keeps its data in an etcd of its own")
	case runtime == fkev1.RuntimeLocal:
		datastore = "" // dedicated, the default
	}
	return runtime, datastore, nil
}

// restoreInPlace asks the manager to restore cl from its snapshot and
// waits until it did and the cluster is Ready again.
func restoreInPlace(ctx context.Context, g *globals, c client.Client, cl *fkev1.Cluster, snapshot string, timeout time.Duration) error {
	request := snapshot + "@" + strconv.FormatInt(time.Now().UnixNano(), 10)
	patch := client.MergeFrom(cl.DeepCopy())
	if cl.Annotations == nil {
		cl.Annotations = map[string]string{}
	}
	cl.Annotations[fkev1.AnnotationRestoreInPlace] = request
	if err := c.Patch(ctx, cl, patch); err != nil {
		return explainCluster(err, cl.Name)
	}
	fmt.Fprintf(g.errOut, "restore of %s from %s requested; waiting\n", cl.Name, snapshot)
	key := client.ObjectKeyFromObject(cl)
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, cl); err != nil {
			return false, err
		}
		if cl.Status.RestoreRequest != request {
			return false, nil
		}
		r := meta.FindStatusCondition(cl.Status.Conditions, fkev1.ConditionRestored)
		if r == nil {
			return false, nil
		}
		if r.Status != metav1.ConditionTrue {
			return false, fmt.Errorf("%s", r.Message)
		}
		msg = r.Message
		return meta.IsStatusConditionTrue(cl.Status.Conditions, fkev1.ConditionReady), nil
	})
	if err != nil {
		return fmt.Errorf("restoring %s in place: %w (see `fke cluster get %s`)", cl.Name, err, cl.Name)
	}
	fmt.Fprintln(g.out, msg)
	return nil
}
