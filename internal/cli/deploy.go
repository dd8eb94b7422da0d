package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/deploy"
	"fke.dev/fke/internal/deploy/capacity"
	"fke.dev/fke/internal/versions"
)

// quietKlog silences klog, through which cli-utils and kubectl log what the
// applier already reports as progress.
func quietKlog() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

// target is the tenant cluster a deploy command works on: from the
// management plane (--cluster) or from a kubeconfig alone (--kubeconfig).
type target struct {
	clusterFlag, kubeconfig string

	cfg *rest.Config
	// mgmt and cl are set only when the cluster came from the management
	// plane; the capacity preview needs them.
	mgmt client.Client
	cl   *fkev1.Cluster
}

func (t *target) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&t.clusterFlag, "cluster", "", "tenant cluster (NAME, or MANAGEMENT-NAMESPACE/NAME) from the management plane")
	cmd.Flags().StringVar(&t.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster instead (a CI secret; no management plane needed)")
}

// connect finds the cluster's rest config; a kubeconfig wins over the
// management plane, which is then asked only for the capacity preview.
func (t *target) connect(ctx context.Context, g *globals, needMgmt bool) error {
	if t.clusterFlag == "" && t.kubeconfig == "" {
		return errors.New("say which cluster: --cluster NAME, or --kubeconfig FILE")
	}
	if t.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", t.kubeconfig)
		if err != nil {
			return fmt.Errorf("--kubeconfig %s: %w", t.kubeconfig, err)
		}
		t.cfg = cfg
		if t.clusterFlag == "" || !needMgmt {
			return nil
		}
	}
	ns, name := g.namespace, t.clusterFlag
	if before, after, ok := strings.Cut(name, "/"); ok {
		ns, name = before, after
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	cl := &fkev1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
		return explainCluster(err, name)
	}
	t.mgmt, t.cl = c, cl
	if t.cfg != nil {
		return nil
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fkev1.KubeconfigSecretName(name)}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %s has no kubeconfig yet (phase %s): wait with `fke cluster get %s`", name, orDash(cl.Status.Phase), name)
		}
		return explain(err, "kubeconfig")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[fkev1.KubeconfigKey])
	if err != nil {
		return fmt.Errorf("kubeconfig of cluster %s: %w", name, err)
	}
	t.cfg = cfg
	return nil
}

// releaseName derives a release name from a source path: its base name
// without extension, lowercased, other characters turned to '-'.
func releaseName(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	base := strings.TrimSuffix(filepath.Base(abs), filepath.Ext(abs))
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 50 {
		name = strings.Trim(name[:50], "-")
	}
	if name == "" {
		return "app"
	}
	return name
}

func newDeployCmd(g *globals) *cobra.Command {
	var (
		t                                      target
		path, name, ns, output                 string
		set, values                            []string
		wait, prune, dryRun, rollbackOnFailure bool
		timeout                                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "deploy -f PATH (--cluster NAME | --kubeconfig FILE)",
		Short: "Apply manifests, a kustomization or a Helm chart to a cluster and wait until it is ready",
		Long: `Render PATH (a manifest file or directory, a kustomization, or a Helm chart
directory with --values and --set), apply it with server-side apply (field
manager fke), CRDs and namespaces first, and wait until every object is
Current. Files PATH names (a kustomization's bases and patches, a chart's
files, links) must lie inside its tree: the git work tree that holds PATH,
else PATH's directory. Each deploy is recorded as a revision of the release (--name,
default: the base name of PATH) in the cluster: see them with
` + "`fke releases`" + `, go back with ` + "`fke rollback`" + `. Exits 0 only when every object is ready;
a problem that waiting will not cure (an image the registry says does not
exist, a failed Job) ends the wait before --timeout.

--dry-run changes nothing: the server checks every object, each one's diff is
printed, and (with --cluster) the nodes the autoscaled pools would add for
the new pods or no longer need, and the change in price per hour, as the
node autoscaler's own decisions find them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("-f PATH is required: a manifest file or directory, a kustomization or a chart")
			}
			if output != "" && output != "json" {
				return fmt.Errorf("unknown output format %q: use json", output)
			}
			if name == "" {
				name = releaseName(path)
			}
			if err := deploy.ValidateRelease(name); err != nil {
				return err
			}
			if ns == "" {
				ns = "default"
			}
			// Rendering comes before any connection, so that bad input is
			// refused first: charts see the version fke runs by default.
			src := deploy.Source{Path: path, Set: set, ReleaseName: name, Namespace: ns, KubeVersion: versions.Default}
			// The values files named here are the caller's own choice, read
			// as they are; what PATH holds is content, read inside its tree.
			for _, f := range values {
				data, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("--values: %w; nothing was applied", err)
				}
				src.Values = append(src.Values, deploy.Values{Name: f, Data: data})
			}
			rendered, err := deploy.Render(src)
			if err != nil {
				return fmt.Errorf("%w; nothing was applied", err)
			}
			quietKlog()
			ctx := cmd.Context()
			if err := t.connect(ctx, g, dryRun); err != nil {
				return err
			}
			dc, err := deploy.NewCluster(t.cfg)
			if err != nil {
				return err
			}
			p := &printer{out: g.out, json: output == "json"}
			d := &deploy.Deployer{Cluster: dc}
			if !p.json {
				fmt.Fprintf(g.out, "release %s: %d objects from %s (%s)\n", name, len(rendered.Objects), path, rendered.Kind)
			}
			out, err := d.Deploy(ctx, deploy.Request{
				Options: deploy.Options{
					Release: name, Namespace: ns, Prune: prune, DryRun: dryRun, Wait: wait, Timeout: timeout, Progress: p.progress,
				},
				Rendered: rendered, Source: path, RollbackOnFailure: rollbackOnFailure,
			})
			if dryRun && out != nil && out.Result != nil {
				return p.dryRun(ctx, &t, dc, out.Result, err)
			}
			if dryRun && err != nil {
				return unreachable(err)
			}
			return p.outcome(name, out, err)
		},
	}
	t.flags(cmd)
	cmd.Flags().StringVarP(&path, "filename", "f", "", "manifest file or directory, kustomization directory, or Helm chart directory")
	cmd.Flags().StringVar(&name, "name", "", "release name (default: the base name of -f)")
	cmd.Flags().StringVarP(&ns, "namespace", "n", "default", "namespace of the namespaced objects that name none (and the chart's .Release.Namespace)")
	cmd.Flags().StringArrayVar(&set, "set", nil, "Helm value key=value (repeatable)")
	cmd.Flags().StringArrayVar(&values, "values", nil, "Helm values file (repeatable; later files win)")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until every object is Current (--wait=false: return once applied)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete objects an earlier revision applied that the source no longer has")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "server-side dry run: print each object's diff and the capacity it needs; change nothing")
	cmd.Flags().BoolVar(&rollbackOnFailure, "rollback-on-failure", false, "when the objects do not become ready, apply the last healthy revision again (without one, as on a first deploy: remove what the deploy created)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: one JSON document at the end instead of progress lines")
	return cmd
}

// printer writes a deploy's progress and outcome, as lines or as JSON.
type printer struct {
	out  io.Writer
	json bool
}

func (p *printer) progress(pr deploy.Progress) {
	if p.json {
		return
	}
	line := fmt.Sprintf("  %-9s %s", pr.Action, pr.Object)
	if pr.Message != "" {
		line += ": " + pr.Message
	}
	fmt.Fprintln(p.out, line)
}

// unreachable words an error of a tenant API server that does not answer.
func unreachable(err error) error {
	var uerr *url.Error
	var nerr *net.OpError
	if errors.As(err, &uerr) || errors.As(err, &nerr) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("the cluster's API server does not answer: %w; nothing was applied", err)
	}
	return err
}

func (p *printer) outcome(release string, out *deploy.Outcome, err error) error {
	if out == nil && err != nil {
		err = unreachable(err)
	}
	if p.json {
		doc := map[string]any{"release": release, "ready": err == nil}
		if out != nil {
			doc["revision"], doc["result"] = out.Revision, out.Result
			if out.RolledBack != 0 {
				doc["rolledBack"], doc["rolledBackTo"] = out.RolledBack, out.RolledBackTo
			}
			var removed *deploy.RemovedError
			if errors.As(err, &removed) {
				doc["removed"], doc["kept"] = orEmpty(out.Removed), orEmpty(out.Kept)
			}
		}
		if err != nil {
			doc["error"] = err.Error()
		}
		if jerr := printJSON(p.out, doc); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		if out != nil && out.Revision > 0 {
			return fmt.Errorf("release %s revision %d: %w", release, out.Revision, err)
		}
		return err
	}
	fmt.Fprintf(p.out, "release %s revision %d: every object is ready\n", release, out.Revision)
	return nil
}

// dryRun prints the diff of each object and the capacity preview.
func (p *printer) dryRun(ctx context.Context, t *target, dc *deploy.Cluster, res *deploy.Result, applyErr error) error {
	var changes []capacity.Change
	for _, o := range res.Objects {
		if o.Planned != nil && (o.Action == "created" || o.Action == "changed" || o.Action == "pruned") {
			changes = append(changes, capacity.Change{Object: o.Planned, Existing: o.Action == "changed", Removed: o.Action == "pruned"})
		}
	}
	var est *capacity.Estimate
	note := ""
	if t.mgmt == nil {
		note = "capacity preview skipped: it needs the management plane (--cluster), not only --kubeconfig"
	} else if e, err := capacity.Gather(ctx, t.mgmt, t.cl, dc.Client, changes, time.Now()); err != nil {
		note = "capacity preview failed: " + err.Error()
	} else {
		est = &e
	}
	if p.json {
		doc := map[string]any{"dryRun": true, "result": res, "capacity": est}
		if note != "" {
			doc["capacityNote"] = note
		}
		if applyErr != nil {
			doc["error"] = applyErr.Error()
		}
		if err := printJSON(p.out, doc); err != nil {
			return err
		}
		return applyErr
	}
	for _, o := range res.Objects {
		if o.Diff != "" && o.Action != "unchanged" {
			fmt.Fprintf(p.out, "--- %s (%s)\n%s", o.Object, o.Action, o.Diff)
			if !strings.HasSuffix(o.Diff, "\n") {
				fmt.Fprintln(p.out)
			}
		}
	}
	if note != "" {
		fmt.Fprintln(p.out, note)
	} else {
		printEstimate(p.out, est)
	}
	if applyErr != nil {
		return fmt.Errorf("dry run: %w", applyErr)
	}
	fmt.Fprintln(p.out, "dry run: nothing was changed")
	return nil
}

func printEstimate(out io.Writer, est *capacity.Estimate) {
	fmt.Fprintf(out, "capacity: %d new or changed pods, %d fit on nodes that exist or are coming\n", est.Pods, est.FitNow)
	if len(est.Grow) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  POOL\tTYPE\tNODES\tADD\tPRICE/H\tCOST/H")
		for _, g := range est.Grow {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t+%d\t%s\t+%s\n", g.Pool, g.InstanceType, g.From, g.Add, capacity.FormatPrice(g.PricePerHour), capacity.FormatPrice(g.CostPerHour))
		}
		tw.Flush()
	}
	for _, f := range est.Free {
		fmt.Fprintf(out, "capacity: pool %s (%s) would no longer need %d node(s), -%s per hour, once unneeded for %s: %s\n",
			f.Pool, f.InstanceType, len(f.Nodes), capacity.FormatPrice(f.SavingPerHour), f.After, strings.Join(f.Nodes, ", "))
	}
	fmt.Fprintf(out, "capacity: price change %+.2f per hour\n", est.CostPerHour)
	for _, r := range est.NoRoom {
		fmt.Fprintln(out, "capacity: no pool can take "+r)
	}
}

// orEmpty makes a nil list an empty one, for JSON.
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// pickRelease returns name, or the only release the cluster has.
func pickRelease(ctx context.Context, st deploy.Store, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	revs, err := st.List(ctx, "")
	if err != nil {
		return "", err
	}
	var names []string
	for _, r := range revs {
		if !slices.Contains(names, r.Release) {
			names = append(names, r.Release)
		}
	}
	switch len(names) {
	case 0:
		return "", errors.New("the cluster has no releases: deploy one with `fke deploy`")
	case 1:
		return names[0], nil
	}
	slices.Sort(names)
	return "", fmt.Errorf("the cluster has releases %s: choose one with --name", strings.Join(names, ", "))
}

func newRollbackCmd(g *globals) *cobra.Command {
	var (
		t       target
		name    string
		to      int
		wait    bool
		timeout time.Duration
		output  string
	)
	cmd := &cobra.Command{
		Use:   "rollback (--cluster NAME | --kubeconfig FILE) [--name RELEASE] [--to REV]",
		Short: "Apply an earlier revision of a release again (with prune)",
		Long: `Apply an earlier revision again, as a new revision, pruning what it does not
have. Without --to: the newest healthy revision before the latest one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			quietKlog()
			ctx := cmd.Context()
			if err := t.connect(ctx, g, false); err != nil {
				return err
			}
			dc, err := deploy.NewCluster(t.cfg)
			if err != nil {
				return err
			}
			release, err := pickRelease(ctx, deploy.Store{Client: dc.Client}, name)
			if err != nil {
				return unreachable(err)
			}
			p := &printer{out: g.out, json: output == "json"}
			d := &deploy.Deployer{Cluster: dc}
			out, err := d.Rollback(ctx, release, to, deploy.Options{Release: release, Wait: wait, Timeout: timeout, Progress: p.progress})
			return p.outcome(release, out, err)
		},
	}
	t.flags(cmd)
	cmd.Flags().StringVar(&name, "name", "", "release (default: the cluster's only one)")
	cmd.Flags().IntVar(&to, "to", 0, "revision to return to (default: the last healthy one before the latest)")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until every object is Current")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: one JSON document at the end")
	return cmd
}

func newReleasesCmd(g *globals) *cobra.Command {
	var (
		t      target
		name   string
		output string
	)
	cmd := &cobra.Command{
		Use:   "releases (--cluster NAME | --kubeconfig FILE) [--name RELEASE]",
		Short: "List the revisions of the releases deployed to a cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := t.connect(ctx, g, false); err != nil {
				return err
			}
			dc, err := deploy.NewCluster(t.cfg)
			if err != nil {
				return err
			}
			revs, err := deploy.Store{Client: dc.Client}.List(ctx, name)
			if err != nil {
				return unreachable(err)
			}
			slices.SortFunc(revs, func(a, b deploy.Revision) int {
				if c := strings.Compare(a.Release, b.Release); c != 0 {
					return c
				}
				return a.Number - b.Number
			})
			if output != "" {
				if revs == nil {
					revs = []deploy.Revision{}
				}
				return printObject(g.out, output, revs)
			}
			if len(revs) == 0 {
				fmt.Fprintln(g.out, "no releases: deploy one with `fke deploy`")
				return nil
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RELEASE\tREVISION\tSTATUS\tAGE\tOBJECTS\tKIND\tDIGEST\tSOURCE\tMESSAGE")
			for _, r := range revs {
				digest := strings.TrimPrefix(r.Digest, "sha256:")
				if len(digest) > 12 {
					digest = digest[:12]
				}
				msg := r.Message
				if len(msg) > 100 {
					msg = msg[:97] + "..." // -o yaml shows it whole
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Release, r.Number, r.Status, ageOf(r.Applied), r.Objects, orDash(string(r.Kind)), orDash(digest), orDash(r.Source), orDash(msg))
			}
			return tw.Flush()
		},
	}
	t.flags(cmd)
	cmd.Flags().StringVar(&name, "name", "", "only this release")
	cmd.Flags().StringVarP(&output, "output", "o", "", "yaml or json")
	return cmd
}

func ageOf(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return age(metav1.NewTime(t))
}
