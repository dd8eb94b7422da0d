package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/yaml"
)

// diff compares what a dry run returned with the live object: "created"
// with the whole object, "changed" with a unified diff, or "unchanged".
func (r *run) diff(ctx context.Context, id object.ObjMetadata, planned *unstructured.Unstructured) (action, diff string) {
	live, err := r.c.live(ctx, id)
	if err != nil {
		return "changed", fmt.Sprintf("(live object not readable: %v)", err)
	}
	return Diff(live, planned)
}

// Diff returns the action a dry run foretells for one object and the
// difference between live (nil when the object does not exist) and the
// dry run's result, both without the fields the server alone keeps
// (managedFields, resourceVersion, uid, generation, timestamps, status)
// (pure).
func Diff(live, planned *unstructured.Unstructured) (action, diff string) {
	to := comparable(planned)
	if live == nil {
		return "created", unified("", to, "(none)", "planned")
	}
	from := comparable(live)
	if from == to {
		return "unchanged", ""
	}
	return "changed", unified(from, to, "live", "planned")
}

func comparable(u *unstructured.Unstructured) string {
	if u == nil {
		return ""
	}
	c := u.DeepCopy()
	for _, f := range []string{"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(c.Object, "metadata", "annotations", "deployment.kubernetes.io/revision")
	if len(c.GetAnnotations()) == 0 {
		unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
	}
	unstructured.RemoveNestedField(c.Object, "status")
	data, err := yaml.Marshal(c.Object)
	if err != nil {
		return fmt.Sprintf("(cannot show: %v)", err)
	}
	return string(data)
}

func unified(a, b, fromName, toName string) string {
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(b), FromFile: fromName, ToFile: toName, Context: 3,
	})
	if err != nil {
		return fmt.Sprintf("(cannot diff: %v)", err)
	}
	return d
}

// newParent reports whether a dry-run apply failed only because the
// object's namespace or CRD does not exist yet: a namespace a deploy
// creates (in the source, or created for it) or a CRD of the source (pure).
func newParent(err error, objs []*unstructured.Unstructured) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && strings.Contains(msg, fmt.Sprintf("namespaces %q not found", ns)) {
			return true
		}
		if object.IsCRD(o) {
			// A CRD without these fields matches nothing: "" is enough.
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			if kind != "" && strings.Contains(msg, "no matches for kind \""+kind+"\"") && strings.Contains(msg, group) {
				return true
			}
		}
	}
	return false
}

// applyErrorMessage shortens the errors of an apply to what the server said.
func applyErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return shortenInvalid(err.Error())
	}
	st := status.Status()
	if st.Details == nil || len(st.Details.Causes) == 0 {
		return st.Message
	}
	// An invalid object's message repeats the whole rejected value; the
	// causes say which field and why.
	var causes []string
	for _, c := range st.Details.Causes {
		msg := c.Message
		if strings.HasPrefix(msg, "Invalid value:") {
			if i := strings.LastIndex(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
		}
		causes = append(causes, strings.TrimSpace(c.Field+": "+msg))
	}
	return "invalid: " + strings.Join(causes, "; ")
}

// explainApplyError words an error that stopped the whole apply.
func explainApplyError(err error) error {
	return fmt.Errorf("applying: %w", err)
}

// shortenInvalid drops the rejected value an "Invalid value: <value>: why"
// message repeats (a whole pod template for an immutable Job), keeping the
// field and why (pure).
func shortenInvalid(msg string) string {
	const marker = "Invalid value: "
	i := strings.Index(msg, marker)
	j := strings.LastIndex(msg, ": ")
	if i < 0 || j < i+len(marker) || j-i < 80 {
		return msg
	}
	return msg[:i] + msg[j+2:]
}
