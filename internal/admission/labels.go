package admission

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// reservedDomains are the label and taint key prefixes (with every
// subdomain, e.g. node.kubernetes.io) that Kubernetes and fke set
// themselves; a node pool may not set them.
var reservedDomains = []string{"kubernetes.io", "k8s.io", "fke.dev"}

// allowedPrefixes are the exceptions: node-restriction.kubernetes.io/ is
// the prefix Kubernetes keeps for labels an administrator puts on nodes
// (kubelets may not set them). No fke.dev/ key is open to users: fke sets
// fke.dev/cluster and fke.dev/nodepool itself, and fke.dev/do-not-disrupt
// is a pod annotation, not a node label.
var allowedPrefixes = []string{"node-restriction.kubernetes.io/"}

// allowedLabels are well-known labels a pool may set on its nodes: the
// topology that places it (they override the instance type's zone).
var allowedLabels = []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion}

// reservedKey reports whether key uses a prefix only Kubernetes or fke may set.
func reservedKey(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, a := range allowedPrefixes {
		if strings.HasPrefix(key, a) {
			return false
		}
	}
	if slices.Contains(allowedLabels, key) {
		return false
	}
	for _, d := range reservedDomains {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// checkKey returns why key cannot be a label or taint key (what names it in
// the message: "label key" or "taint key"), or "".
func checkKey(what, key string) string {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Sprintf("%s %q is not valid: %s", what, key, strings.Join(errs, "; "))
	}
	if reservedKey(key) {
		return fmt.Sprintf("%s %q uses a prefix reserved for Kubernetes and fke (%s and their subdomains): use a prefix of your own, such as example.com/, or %s (%s are allowed too)",
			what, key, strings.Join(reservedDomains, ", "), strings.Join(allowedPrefixes, ", "), strings.Join(allowedLabels, ", "))
	}
	return ""
}

// checkValue returns why value cannot be a label or taint value, or "".
// The value itself is not repeated: it may be long.
func checkValue(what, key, value string) string {
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return fmt.Sprintf("%s %q: value is not valid: %s", what, key, strings.Join(errs, "; "))
	}
	return ""
}

// PoolLabelsAndTaints returns why a node pool's labels and taints cannot be
// put on nodes, one message per problem, in a stable order; nil if they can.
func PoolLabelsAndTaints(labels map[string]string, taints []corev1.Taint) []string {
	var out []string
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if msg := checkKey("label key", k); msg != "" {
			out = append(out, msg)
		}
		if msg := checkValue("label", k, labels[k]); msg != "" {
			out = append(out, msg)
		}
	}
	seen := map[string]bool{}
	for _, t := range taints {
		if msg := checkKey("taint key", t.Key); msg != "" {
			out = append(out, msg)
		}
		if msg := checkValue("taint", t.Key, t.Value); msg != "" {
			out = append(out, msg)
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			out = append(out, fmt.Sprintf("taint %q: effect %q is not one of NoSchedule, PreferNoSchedule, NoExecute", t.Key, t.Effect))
		}
		id := t.Key + ":" + string(t.Effect)
		if seen[id] {
			out = append(out, fmt.Sprintf("taint %q with effect %s appears twice: keep one", t.Key, t.Effect))
		}
		seen[id] = true
	}
	return out
}
