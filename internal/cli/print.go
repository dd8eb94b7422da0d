// The CLI's output helpers: tables, -o yaml|json, events and conditions.

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
)

// object names an object events are about.
type object struct{ kind, name string }

// printEvents prints the events of objects in namespace.
func printEvents(ctx context.Context, c client.Client, namespace string, out io.Writer, objects ...object) error {
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(namespace)); err != nil {
		return nil //nolint:nilerr // events are best effort in a description
	}
	fmt.Fprintln(out, "\nEvents:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  AGE\tTYPE\tREASON\tMESSAGE")
	n := 0
	for _, e := range evs.Items {
		if !slices.Contains(objects, object{e.InvolvedObject.Kind, e.InvolvedObject.Name}) {
			continue
		}
		ts := e.LastTimestamp
		if ts.IsZero() {
			ts = metav1.NewTime(e.EventTime.Time)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", age(ts), e.Type, e.Reason, e.Message)
		n++
	}
	if n == 0 {
		fmt.Fprintln(tw, "  <none>")
	}
	return tw.Flush()
}

func printObject(out io.Writer, format string, obj any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(obj)
	case "yaml":
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = out.Write(data)
		return err
	default:
		return fmt.Errorf("unknown output format %q: use yaml or json", format)
	}
}

func conditionStatus(conds []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return string(c.Status)
	}
	return "-"
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// componentSummary writes each component with its version, e.g.
// "kube-apiserver v1.37.2, kube-scheduler v1.36.3".
func componentSummary(cs []fkev1.ComponentVersion) string {
	var parts []string
	for _, c := range cs {
		if c.Version == "" {
			continue
		}
		p := c.Name + " " + c.Version
		if !c.Ready {
			p += " (not ready)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// printAddons lists the cluster's addons: those in status, then those
// turned on that have no status yet, then those turned off.
func printAddons(out io.Writer, cl *fkev1.Cluster) error {
	fmt.Fprintln(out, "\nAddons:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tVERSION\tPHASE\tSINCE\tMESSAGE")
	seen := map[string]bool{}
	for _, a := range cl.Status.Addons {
		seen[a.Name] = true
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", a.Name, orDash(a.Version), a.Phase, age(a.LastTransitionTime), a.Message)
	}
	for _, a := range []struct {
		name string
		on   bool
	}{
		{addons.MetricsServerName, cl.Spec.Addons.MetricsServer.IsEnabled()},
		{addons.GPUMetricsName, cl.Spec.Addons.GPUMetrics.IsEnabled()},
		{addons.VPAName, cl.Spec.Addons.VerticalPodAutoscaler.Enabled},
	} {
		switch {
		case seen[a.name]:
		case a.on:
			fmt.Fprintf(tw, "  %s\t-\tPending\t-\twaits for the control plane\n", a.name)
		default:
			fmt.Fprintf(tw, "  %s\t-\tOff\t-\t-\n", a.name)
		}
	}
	return tw.Flush()
}
