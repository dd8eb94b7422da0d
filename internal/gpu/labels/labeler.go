package labels

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OwnedAnnotation lists, comma-separated, the labels the agent set last
// time, so that labels it no longer wants are removed and nobody else's are.
const OwnedAnnotation = "fke.dev/gpu-agent-labels"

// NodeAPI is the part of the Node API the labeler needs.
type NodeAPI interface {
	// GetNode returns the Node called name.
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// PatchNode applies a patch of type pt to the Node (or its subresource).
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error
}

// Labeler keeps this node's nvidia.com/ labels equal to what For computes.
type Labeler struct {
	API  NodeAPI
	Node string
	Log  *slog.Logger
}

// Apply makes the Node carry want: it adds and updates those labels and
// removes the nvidia.com/ labels it set before that are no longer wanted,
// with one merge patch; labels it does not own are never touched. It does
// nothing when the Node already matches.
func (l *Labeler) Apply(ctx context.Context, want map[string]string) error {
	node, err := l.API.GetNode(ctx, l.Node)
	if err != nil {
		return fmt.Errorf("getting node %s: %w", l.Node, err)
	}
	patch, changed, err := PatchFor(node, want)
	if err != nil {
		return err
	}
	if !changed {
		return nil
	}
	if err := l.API.PatchNode(ctx, l.Node, types.MergePatchType, patch); err != nil {
		return fmt.Errorf("patching labels of node %s: %w", l.Node, err)
	}
	if l.Log != nil {
		l.Log.Info("node GPU labels applied", "node", l.Node, "labels", len(want))
	}
	return nil
}

// PatchFor returns the JSON merge patch that takes node to want, and whether
// anything changes. Every key in want must be one the agent owns (Owns).
func PatchFor(node *corev1.Node, want map[string]string) ([]byte, bool, error) {
	for k := range want {
		if !Owns(k) {
			return nil, false, fmt.Errorf("label %q is not under %s or %s", k, Prefix, FKEPrefix)
		}
	}
	labels := map[string]*string{}
	for k, v := range want {
		if cur, ok := node.Labels[k]; !ok || cur != v {
			v := v
			labels[k] = &v
		}
	}
	for _, k := range strings.Split(node.Annotations[OwnedAnnotation], ",") {
		if !Owns(k) {
			continue
		}
		if _, keep := want[k]; !keep {
			if _, present := node.Labels[k]; present {
				labels[k] = nil
			}
		}
	}
	owned := strings.Join(Keys(want), ",")
	if len(labels) == 0 && node.Annotations[OwnedAnnotation] == owned {
		return nil, false, nil
	}
	patch := map[string]any{"metadata": map[string]any{
		"labels":      labels,
		"annotations": map[string]string{OwnedAnnotation: owned},
	}}
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, false, fmt.Errorf("encoding label patch: %w", err)
	}
	return data, true, nil
}
