package deploy

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// Health is the state of a release's objects taken together.
type Health struct {
	// Status is Current when every object is, Failed when one has failed,
	// NotFound when one is missing, else InProgress.
	Status string
	// Problems say why, one line per object that is not Current.
	Problems []string
}

// Health reads objs (a revision's objects, namespaced ones without a
// namespace getting namespace) from the cluster and computes their kstatus,
// explaining each object that is not Current as a failed deploy does.
func (c *Cluster) Health(ctx context.Context, objs []*unstructured.Unstructured, namespace string) (Health, error) {
	objs = copyObjects(objs)
	if err := c.setNamespaces(objs, namespace); err != nil {
		return Health{}, err
	}
	h := Health{Status: status.CurrentStatus.String()}
	worse := func(s status.Status) {
		rank := map[string]int{status.CurrentStatus.String(): 0, status.InProgressStatus.String(): 1, status.NotFoundStatus.String(): 2, status.FailedStatus.String(): 3}
		if rank[s.String()] > rank[h.Status] {
			h.Status = s.String()
		}
	}
	for _, o := range objs {
		id := object.UnstructuredToObjMetadata(o)
		live, err := c.live(ctx, id)
		if err != nil {
			return Health{}, fmt.Errorf("reading %s: %w", idName(id), err)
		}
		if live == nil {
			worse(status.NotFoundStatus)
			h.Problems = append(h.Problems, idName(id)+": deleted")
			continue
		}
		st, err := status.Compute(live)
		if err != nil {
			return Health{}, fmt.Errorf("status of %s: %w", idName(id), err)
		}
		if st.Status == status.CurrentStatus {
			continue
		}
		worse(st.Status)
		why := c.diagnose(ctx, live)
		if len(why) == 0 && st.Message != "" {
			why = []string{st.Message}
		}
		h.Problems = append(h.Problems, fmt.Sprintf("%s (%s): %s", idName(id), st.Status, strings.Join(why, "; ")))
	}
	return h, nil
}

// Drift returns the objects of a release that differ in the cluster from
// what applying objs again would make them (a server-side dry run), by
// name: what someone changed by hand, or deleted.
func (c *Cluster) Drift(ctx context.Context, objs []*unstructured.Unstructured, release, namespace string) ([]string, error) {
	res, err := c.Apply(ctx, objs, Options{Release: release, Namespace: namespace, DryRun: true})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range res.Objects {
		if o.Action == "changed" || o.Action == "created" {
			out = append(out, o.Object)
		}
	}
	return out, nil
}
