package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/promotion"
)

func newReleaseCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "release",
		Aliases: []string{"rel"},
		Short:   "GitOps releases: deploy a git path to clusters, stage by stage (create, list, get, approve, sync, suspend, resume, delete)",
	}
	cmd.AddCommand(newReleaseCreateCmd(g), newReleaseListCmd(g), newReleaseGetCmd(g), newReleaseApproveCmd(g),
		newReleaseSyncCmd(g), newReleaseSuspendCmd(g, true), newReleaseSuspendCmd(g, false), newReleaseDeleteCmd(g))
	return cmd
}

// parseStage reads --stage NAME=TARGETS[,soak=D][,approval][,path=DIR]: TARGETS are
// cluster names joined by '+', or selector:KEY=VALUE[&KEY=VALUE...].
func parseStage(s string) (fkev1.ReleaseStage, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || rest == "" {
		return fkev1.ReleaseStage{}, fmt.Errorf("--stage %q: write NAME=CLUSTER[+CLUSTER...][,soak=30s][,approval] or NAME=selector:env=prod", s)
	}
	parts := strings.Split(rest, ",")
	st := fkev1.ReleaseStage{Name: name}
	if sel, ok := strings.CutPrefix(parts[0], "selector:"); ok {
		ls, err := metav1.ParseToLabelSelector(strings.ReplaceAll(sel, "&", ","))
		if err != nil {
			return st, fmt.Errorf("--stage %s: selector %q: %w", name, sel, err)
		}
		st.Selector = ls
	} else {
		st.Clusters = strings.Split(parts[0], "+")
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "soak":
			d, err := time.ParseDuration(v)
			if err != nil {
				return st, fmt.Errorf("--stage %s: soak %q: %w", name, v, err)
			}
			st.Soak = &metav1.Duration{Duration: d}
		case "approval":
			st.RequireApproval = true
		case "path":
			st.Path = v
		default:
			return st, fmt.Errorf("--stage %s: unknown option %q (soak=D, approval, path=DIR)", name, p)
		}
	}
	return st, nil
}

func newReleaseCreateCmd(g *globals) *cobra.Command {
	var (
		rel                fkev1.Release
		stages, valuesFile []string
		values, secret     string
		interval, timeout  time.Duration
		unhealthyTimeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME --repo URL --stage dev=CLUSTER --stage prod=CLUSTER,soak=10m[,approval]",
		Short: "Create a Release: a path of a git repository deployed to clusters in stages",
		Example: `  fke release create app --repo file:///srv/git/app --path deploy --stage dev=dev --stage prod=prod,soak=5m
  fke release create app --repo https://github.com/org/app.git --secret git-token --revision v1.2.0 \
      --stage dev=selector:env=dev --stage prod=selector:env=prod,soak=1h,approval`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rel.Name, rel.Namespace = args[0], g.namespace
			if err := validateName("release", rel.Name); err != nil {
				return err
			}
			if len(stages) == 0 {
				return fmt.Errorf("a release needs at least one --stage NAME=CLUSTER")
			}
			for _, s := range stages {
				st, err := parseStage(s)
				if err != nil {
					return err
				}
				rel.Spec.Stages = append(rel.Spec.Stages, st)
			}
			rel.Spec.Source.ValuesFiles = valuesFile
			if secret != "" {
				rel.Spec.Source.SecretRef = &fkev1.LocalObjectReference{Name: secret}
			}
			if values != "" {
				js, err := yaml.YAMLToJSON([]byte(values))
				if err != nil {
					return fmt.Errorf("--values-inline: %w", err)
				}
				rel.Spec.Source.Values = &apiextensionsv1.JSON{Raw: js}
			}
			if interval > 0 {
				rel.Spec.Interval = &metav1.Duration{Duration: interval}
			}
			if timeout > 0 {
				rel.Spec.Timeout = &metav1.Duration{Duration: timeout}
			}
			if unhealthyTimeout > 0 {
				rel.Spec.UnhealthyTimeout = &metav1.Duration{Duration: unhealthyTimeout}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), &rel); err != nil {
				return explainRelease(err, rel.Name)
			}
			fmt.Fprintf(g.out, "release %s created; follow it with `fke release get %s`\n", rel.Name, rel.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&rel.Spec.Source.URL, "repo", "", "git repository: https://..., ssh://... or file:///...")
	f.StringVar(&rel.Spec.Source.Revision, "revision", "", "branch, tag or commit (default main)")
	f.StringVar(&rel.Spec.Source.Path, "path", "", "path in the repository: manifests, a kustomization or a Helm chart (default .)")
	f.StringVar(&secret, "secret", "", "Secret with the repository's credentials (token [username] for https; identity, known_hosts for ssh)")
	f.StringArrayVar(&stages, "stage", nil, "a stage, in promotion order: NAME=CLUSTER[+CLUSTER...][,soak=D][,approval][,path=DIR] or NAME=selector:KEY=VALUE[&...][,...]")
	f.StringArrayVar(&valuesFile, "values", nil, "Helm values file in the repository (repeatable)")
	f.StringVar(&values, "values-inline", "", "Helm values as YAML")
	f.StringArrayVar(&rel.Spec.Source.Set, "set", nil, "Helm --set expression (repeatable)")
	f.StringVar(&rel.Spec.Namespace, "target-namespace", "", "namespace for objects of the source that name none (default default)")
	f.DurationVar(&interval, "interval", 0, "how often the repository is polled (default 1m)")
	f.DurationVar(&timeout, "timeout", 0, "how long a sync waits for its objects to be Current before rolling back (default 5m)")
	f.DurationVar(&unhealthyTimeout, "unhealthy-timeout", 0, "how long a stage healthy with a revision may then be unhealthy before it rolls back to the one before (default 5m)")
	f.BoolVar(&rel.Spec.CorrectDrift, "correct-drift", false, "apply again objects changed by hand (otherwise drift is only reported)")
	f.BoolVar(&rel.Spec.Suspend, "suspend", false, "create it suspended")
	_ = cmd.MarkFlagRequired("repo")
	return cmd
}

func explainRelease(err error, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("release %q not found: list releases with `fke release list`", name)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("release %q already exists: see `fke release get %s`", name, name)
	}
	return explain(err, "release "+name)
}

func (g *globals) getRelease(ctx context.Context, c client.Client, name string) (*fkev1.Release, error) {
	rel := &fkev1.Release{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: g.namespace, Name: name}, rel); err != nil {
		return nil, explainRelease(err, name)
	}
	return rel, nil
}

func stagesLine(rel *fkev1.Release) string {
	var parts []string
	for _, st := range rel.Status.Stages {
		s := st.Name + "=" + orDash(promotion.Short(st.Revision))
		if st.Pending != "" {
			s += " (next " + promotion.Short(st.Pending) + ")"
		}
		parts = append(parts, s)
	}
	return orDash(strings.Join(parts, " "))
}

func newReleaseListCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List releases",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var list fkev1.ReleaseList
			if err := c.List(cmd.Context(), &list, client.InNamespace(g.namespace)); err != nil {
				return explain(err, "releases")
			}
			if output != "" {
				return printObject(g.out, output, &list)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tREVISION\tREADY\tSTAGES\tAGE")
			for _, rel := range list.Items {
				src := rel.Spec.Source.URL + "@" + rel.Spec.Source.Revision
				if rel.Spec.Suspend {
					src += " (suspended)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", rel.Name, src, orDash(promotion.Short(rel.Status.Revision)),
					conditionStatus(rel.Status.Conditions, fkev1.ConditionReady), stagesLine(&rel), age(rel.CreationTimestamp))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

func newReleaseGetCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a release: source, stages, targets, conditions and events",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			rel, err := g.getRelease(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if output != "" {
				return printObject(g.out, output, rel)
			}
			return describeRelease(cmd.Context(), c, rel, g.out)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	return cmd
}

func describeRelease(ctx context.Context, c client.Client, rel *fkev1.Release, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	s := rel.Spec.Source
	fmt.Fprintf(tw, "Name:\t%s\n", rel.Name)
	fmt.Fprintf(tw, "Source:\t%s, revision %s, path %s\n", s.URL, s.Revision, s.Path)
	fmt.Fprintf(tw, "Revision:\t%s (last fetched %s; newest seen %s)\n", orDash(rel.Status.Revision), ageOrDash(rel.Status.LastFetched), orDash(promotion.Short(rel.Status.LastAttemptedRevision)))
	fmt.Fprintf(tw, "Interval:\t%s (poll); timeout %s; unhealthy timeout %s\n", rel.PollInterval(), rel.SyncTimeout(), rel.UnhealthyTimeoutDuration())
	fmt.Fprintf(tw, "Suspended:\t%v\n", rel.Spec.Suspend)
	fmt.Fprintf(tw, "Drift:\t%s\n", map[bool]string{true: "corrected", false: "reported"}[rel.Spec.CorrectDrift])
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nStages:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STAGE\tREVISION\tHEALTHY\tSOAK\tAPPROVAL\tFAILED\tNEXT\tWAITING")
	for i, st := range rel.Status.Stages {
		var spec fkev1.ReleaseStage
		if i < len(rel.Spec.Stages) {
			spec = rel.Spec.Stages[i]
		}
		fmt.Fprintf(tw, "  %s\t%s\t%v\t%s\t%v\t%s\t%s\t%s\n", st.Name, orDash(promotion.Short(st.Revision)), st.Healthy, spec.SoakTime(),
			spec.RequireApproval, orDash(promotion.Short(st.FailedRevision)), orDash(promotion.Short(st.Pending)), orDash(st.Waiting))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nTargets:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STAGE\tCLUSTER\tREVISION\tDEPLOY-REV\tHEALTH\tDRIFT\tMESSAGE")
	for _, st := range rel.Status.Stages {
		for _, t := range st.Targets {
			health := orDash(t.Health)
			if t.UnhealthySince != nil {
				health += " for " + age(*t.UnhealthySince)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\t%s\n", st.Name, t.Cluster, orDash(promotion.Short(t.Revision)), t.DeployRevision,
				health, orDash(strings.Join(t.Drift, ", ")), orDash(t.Message))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nConditions:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, cond := range rel.Status.Conditions {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printEvents(ctx, c, rel.Namespace, out, object{"Release", rel.Name})
}

func ageOrDash(t *metav1.Time) string {
	if t == nil {
		return "never"
	}
	return age(*t) + " ago"
}

func (g *globals) patchRelease(ctx context.Context, name string, mut func(*fkev1.Release) error) (*fkev1.Release, client.Client, error) {
	c, err := g.client()
	if err != nil {
		return nil, nil, err
	}
	rel, err := g.getRelease(ctx, c, name)
	if err != nil {
		return nil, nil, err
	}
	patch := client.MergeFrom(rel.DeepCopy())
	if err := mut(rel); err != nil {
		return nil, nil, err
	}
	if err := c.Patch(ctx, rel, patch); err != nil {
		return nil, nil, explainRelease(err, name)
	}
	return rel, c, nil
}

func newReleaseApproveCmd(g *globals) *cobra.Command {
	var stage, revision string
	cmd := &cobra.Command{
		Use:   "approve NAME --stage STAGE [--revision SHA]",
		Short: "Approve a revision for a stage that asks for approval (default: the revision waiting there)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var approved string
			_, _, err := g.patchRelease(cmd.Context(), args[0], func(rel *fkev1.Release) error {
				var st *fkev1.ReleaseStageStatus
				for i := range rel.Status.Stages {
					if rel.Status.Stages[i].Name == stage {
						st = &rel.Status.Stages[i]
					}
				}
				if st == nil {
					return fmt.Errorf("release %s has no stage %q", args[0], stage)
				}
				approved = expandRevision(rel, revision)
				if approved == "" {
					approved = st.Pending
				}
				if approved == "" {
					return fmt.Errorf("no revision waits in stage %s; name one with --revision", stage)
				}
				if rel.Annotations == nil {
					rel.Annotations = map[string]string{}
				}
				rel.Annotations[fkev1.AnnotationApprovePrefix+stage] = approved
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "revision %s approved for stage %s of %s\n", promotion.Short(approved), stage, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&stage, "stage", "", "the stage to approve the revision for")
	cmd.Flags().StringVar(&revision, "revision", "", "the commit (full, or a prefix of one the release knows)")
	_ = cmd.MarkFlagRequired("stage")
	return cmd
}

// expandRevision turns a prefix of a commit the release knows into the
// full hash; anything else is returned as given.
func expandRevision(rel *fkev1.Release, rev string) string {
	if rev == "" {
		return ""
	}
	known := []string{rel.Status.Revision, rel.Status.LastAttemptedRevision}
	for _, st := range rel.Status.Stages {
		known = append(known, st.Revision, st.Pending, st.HealthyRevision)
	}
	for _, k := range known {
		if k != "" && strings.HasPrefix(k, rev) {
			return k
		}
	}
	return rev
}

func newReleaseSyncCmd(g *globals) *cobra.Command {
	var (
		waitSync bool
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "sync NAME",
		Short: "Fetch the repository and sync a release now, without waiting for its poll interval",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			request := time.Now().UTC().Format(time.RFC3339Nano)
			_, c, err := g.patchRelease(cmd.Context(), args[0], func(rel *fkev1.Release) error {
				if rel.Annotations == nil {
					rel.Annotations = map[string]string{}
				}
				rel.Annotations[fkev1.AnnotationSyncRequested] = request
				return nil
			})
			if err != nil {
				return err
			}
			if !waitSync {
				fmt.Fprintf(g.out, "sync of %s requested\n", args[0])
				return nil
			}
			rel := &fkev1.Release{}
			err = wait.PollUntilContextTimeout(cmd.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
				if err := c.Get(ctx, client.ObjectKey{Namespace: g.namespace, Name: args[0]}, rel); err != nil {
					return false, err
				}
				return rel.Status.SyncRequest == request, nil
			})
			if err != nil {
				return fmt.Errorf("release %s did not take the sync request within %s: %w", args[0], timeout, err)
			}
			fmt.Fprintf(g.out, "release %s fetched: revision %s; %s\n", args[0], orDash(promotion.Short(rel.Status.Revision)), stagesLine(rel))
			return nil
		},
	}
	cmd.Flags().BoolVar(&waitSync, "wait", false, "wait until the manager has fetched")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long --wait waits")
	return cmd
}

func newReleaseSuspendCmd(g *globals, suspend bool) *cobra.Command {
	use, short := "resume NAME", "Resume fetching and applying a release"
	if suspend {
		use, short = "suspend NAME", "Stop fetching and applying a release (its targets keep what they run)"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := g.patchRelease(cmd.Context(), args[0], func(rel *fkev1.Release) error {
				rel.Spec.Suspend = suspend
				return nil
			}); err != nil {
				return err
			}
			fmt.Fprintf(g.out, "release %s %s\n", args[0], map[bool]string{true: "suspended", false: "resumed"}[suspend])
			return nil
		},
	}
}

func newReleaseDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a release (what it deployed keeps running; `fke releases --cluster C` lists it there)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			rel, err := g.getRelease(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			if err := c.Delete(cmd.Context(), rel); err != nil {
				return explainRelease(err, args[0])
			}
			fmt.Fprintf(g.out, "release %s deleted\n", args[0])
			return nil
		},
	}
}
