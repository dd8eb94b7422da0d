// Package versions says which Kubernetes versions this fke can run and how a
// cluster may move between them. It is the one list the CLI (`fke cluster
// create --version`), the admission webhook and the cluster controller read.
package versions

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Default is the version a cluster gets when it names none. It matches the
// default in the Cluster CRD (api/v1alpha1, spec.version).
const Default = "v1.37.2"

// Previous is the newest patch of the minor before Default: clusters may be
// created on it and upgraded from it to Default. Its components are built
// beside Default's (hack/k8s/v1.36).
const Previous = "v1.36.3"

// supported lists the versions whose upstream binaries this fke ships and
// runs, oldest first.
var supported = []string{Previous, Default}

// Supported returns the versions this fke can run, oldest first.
func Supported() []string { return slices.Clone(supported) }

// Version is a parsed Kubernetes version vMAJOR.MINOR.PATCH.
type Version struct{ Major, Minor, Patch int }

// String writes v as vMAJOR.MINOR.PATCH.
func (v Version) String() string { return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or 1 as v is older than, equal to or newer than w.
func (v Version) Compare(w Version) int {
	for _, d := range [][2]int{{v.Major, w.Major}, {v.Minor, w.Minor}, {v.Patch, w.Patch}} {
		if d[0] != d[1] {
			if d[0] < d[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Parse reads vMAJOR.MINOR.PATCH (the leading v required, no pre-release).
func Parse(s string) (Version, error) {
	rest, ok := strings.CutPrefix(s, "v")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q must be written vMAJOR.MINOR.PATCH, e.g. %s", s, Default)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || strings.Trim(p, "0123456789") != "" || (len(p) > 1 && p[0] == '0') {
			return Version{}, fmt.Errorf("version %q must be written vMAJOR.MINOR.PATCH, e.g. %s", s, Default)
		}
		n[i] = x
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2]}, nil
}

// CheckRunnable returns nil when this fke can run version v, or an error
// that lists the versions it can run.
func CheckRunnable(v string) error {
	if slices.Contains(supported, v) {
		return nil
	}
	return fmt.Errorf("Kubernetes version %q is not available in this fke: use one of %s (`fke versions` lists them)", v, strings.Join(supported, ", "))
}

// CheckUpgrade returns nil when a cluster at version from may be changed to
// version to: the same version, a newer patch, or the next minor; never an
// older version and never more than one minor at once (as kubeadm and every
// managed Kubernetes upgrade). It does not check that to is runnable.
func CheckUpgrade(from, to string) error {
	if from == to {
		return nil
	}
	f, err := Parse(from)
	if err != nil {
		return err
	}
	t, err := Parse(to)
	if err != nil {
		return err
	}
	switch {
	case t.Compare(f) < 0:
		return fmt.Errorf("cannot move a cluster from %s back to %s: downgrades are not supported", from, to)
	case t.Major != f.Major || t.Minor > f.Minor+1:
		return fmt.Errorf("cannot upgrade a cluster from %s to %s: upgrade one minor version at a time (to v%d.%d.x first)", from, to, f.Major, f.Minor+1)
	}
	return nil
}

// UpgradeTargets returns the versions this fke runs that a cluster at from
// may be upgraded to (newer, one minor at most), oldest first.
func UpgradeTargets(from string) []string {
	f, err := Parse(from)
	if err != nil {
		return nil
	}
	var out []string
	for _, v := range supported {
		t, err := Parse(v)
		if err != nil || t.Compare(f) <= 0 {
			continue
		}
		if CheckUpgrade(from, v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// CheckKubeletSkew returns nil when kubelets at version node may join a
// control plane at version controlPlane: never newer, at most three minors
// older (the Kubernetes version skew policy).
func CheckKubeletSkew(controlPlane, node string) error {
	cp, err := Parse(controlPlane)
	if err != nil {
		return err
	}
	n, err := Parse(node)
	if err != nil {
		return err
	}
	switch {
	case n.Major != cp.Major || n.Minor > cp.Minor:
		return fmt.Errorf("nodes at %s would be newer than their control plane at %s: upgrade the cluster first", node, controlPlane)
	case n.Minor+3 < cp.Minor:
		return fmt.Errorf("nodes at %s are more than three minor versions older than their control plane at %s", node, controlPlane)
	}
	return nil
}

// OrDefault returns v, or Default when v is empty (objects made before
// versions were recorded run the default version).
func OrDefault(v string) string {
	if v == "" {
		return Default
	}
	return v
}
