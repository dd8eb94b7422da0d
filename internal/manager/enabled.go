package manager

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	fkev1 "fke.dev/fke/api/v1alpha1"
)

// Runtimes lists the control-plane runtimes fke-manager can run, in the
// order --runtimes documents them.
var Runtimes = []fkev1.ControlPlaneRuntime{fkev1.RuntimeLocal, fkev1.RuntimeHosted}

// DefaultRuntimes are the runtimes a manager runs unless told otherwise
// (what `fke up` runs): the hosted runtime needs a management cluster
// with nodes and an image registry, so it is turned on by name.
var DefaultRuntimes = []fkev1.ControlPlaneRuntime{fkev1.RuntimeLocal}

// Providers lists the node providers fke-manager can run.
var Providers = []fkev1.ProviderName{fkev1.ProviderKwok, fkev1.ProviderLocal}

// ParseRuntimes parses a comma-separated list of control-plane runtimes
// (the --runtimes flag). Blanks around names are ignored, duplicates
// collapse, and "" is the empty list (no runtime: Cluster objects are left
// alone). A name fke-manager cannot run is refused with the names it can.
func ParseRuntimes(list string) ([]fkev1.ControlPlaneRuntime, error) {
	names, err := parseList(list, "runtime", Runtimes, nil)
	if err != nil {
		return nil, err
	}
	out := make([]fkev1.ControlPlaneRuntime, len(names))
	for i, n := range names {
		out[i] = fkev1.ControlPlaneRuntime(n)
	}
	return out, nil
}

// ParseProviders parses a comma-separated list of node providers (the
// --providers flag) as ParseRuntimes does runtimes.
func ParseProviders(list string) ([]fkev1.ProviderName, error) {
	names, err := parseList(list, "provider", Providers, nil)
	if err != nil {
		return nil, err
	}
	out := make([]fkev1.ProviderName, len(names))
	for i, n := range names {
		out[i] = fkev1.ProviderName(n)
	}
	return out, nil
}

// parseList splits list on commas and checks each name against known;
// why, when it has a name, explains a refusal of that name.
func parseList[T ~string](list, kind string, known []T, why map[string]string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(list, ",") {
		name := strings.TrimSpace(f)
		if name == "" || slices.Contains(out, name) {
			continue
		}
		if !slices.Contains(known, T(name)) {
			valid := make([]string, len(known))
			for i, k := range known {
				valid[i] = string(k)
			}
			msg := fmt.Sprintf("unknown %s %q: fke-manager runs %s", kind, name, strings.Join(valid, ", "))
			if reason := why[name]; reason != "" {
				msg = fmt.Sprintf("%s %q cannot be enabled: %s; fke-manager runs %s", kind, name, reason, strings.Join(valid, ", "))
			}
			return nil, errors.New(msg)
		}
		out = append(out, name)
	}
	return out, nil
}

// JoinNames joins names with commas, as the flags take them.
func JoinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ",")
}
