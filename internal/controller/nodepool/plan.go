package nodepool

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Member is what the pool's plan needs to know of one Machine.
type Member struct {
	Name     string
	Ready    bool
	Outdated bool // made from another template
	// Marked by the autoscaler for removal: removed first when the pool shrinks.
	Marked bool
	// Pods is the number of pods that would have to move off its node
	// (DaemonSet and mirror pods excluded).
	Pods int
	// Utilization is the largest requested fraction of cpu, memory and GPUs.
	Utilization float64
	// CreatedUnix orders machines by age.
	CreatedUnix int64
}

// Plan is what to do next: create Create machines and delete Delete.
type Plan struct {
	Create int
	Delete []string
	// Rolling reports a rolling replacement in progress.
	Rolling bool
}

// Decide plans one step towards desired members from the current ones (pure).
// Without outdated members it creates or removes the difference, removing the
// members that cost least to remove first (see removalOrder). With outdated
// members it replaces them honouring maxSurge (extra members allowed above
// desired) and maxUnavailable (ready members that may be missing below desired).
func Decide(desired int, members []Member, maxSurge, maxUnavailable *intstr.IntOrString) Plan {
	outdated := 0
	for _, m := range members {
		if m.Outdated {
			outdated++
		}
	}
	if outdated == 0 {
		switch n := len(members); {
		case n < desired:
			return Plan{Create: desired - n}
		case n > desired:
			return Plan{Delete: names(removalOrder(members)[:n-desired])}
		}
		return Plan{}
	}

	surge, unavailable := resolveBudget(desired, maxSurge, maxUnavailable)
	plan := Plan{Rolling: true}
	upToDate, ready := 0, 0
	for _, m := range members {
		if !m.Outdated {
			upToDate++
		}
		if m.Ready {
			ready++
		}
	}
	// Surge: add up-to-date members while within desired+surge.
	if want := desired - upToDate; want > 0 {
		room := desired + surge - len(members)
		plan.Create = min(want, max(room, 0))
	}
	// Remove outdated members: unready ones freely (they serve nothing),
	// ready ones while enough ready members remain.
	minReady := desired - unavailable
	total := len(members) + plan.Create
	for _, m := range removalOrder(members) {
		if !m.Outdated {
			continue
		}
		if m.Ready {
			if ready-1 < minReady {
				continue
			}
			ready--
		}
		// Never drop below desired members in total while replacing, unless
		// maxUnavailable allows it.
		if total-1 < desired-unavailable {
			continue
		}
		total--
		plan.Delete = append(plan.Delete, m.Name)
	}
	// Scaling down during a rollout: remove surplus up-to-date members too.
	if extra := upToDate - desired; extra > 0 {
		var fresh []Member
		for _, m := range members {
			if !m.Outdated {
				fresh = append(fresh, m)
			}
		}
		plan.Delete = append(plan.Delete, names(removalOrder(fresh)[:extra])...)
	}
	return plan
}

// resolveBudget turns maxSurge and maxUnavailable into counts: surge rounds
// up, unavailable rounds down, and both zero means a surge of one (progress is
// always possible).
func resolveBudget(desired int, maxSurge, maxUnavailable *intstr.IntOrString) (surge, unavailable int) {
	surge = scaled(maxSurge, desired, true, 1)
	unavailable = scaled(maxUnavailable, desired, false, 0)
	if surge == 0 && unavailable == 0 {
		surge = 1
	}
	return surge, unavailable
}

func scaled(v *intstr.IntOrString, total int, roundUp bool, def int) int {
	if v == nil {
		return def
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
	if err != nil || n < 0 {
		return def
	}
	return n
}

// removalOrder sorts members by how cheaply they are removed: marked by the
// autoscaler first, then not ready, then outdated, then those with no pods to move, then the least
// utilized, then the newest.
func removalOrder(members []Member) []Member {
	out := append([]Member(nil), members...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Marked != b.Marked {
			return a.Marked
		}
		if a.Ready != b.Ready {
			return !a.Ready
		}
		if a.Outdated != b.Outdated {
			return a.Outdated
		}
		if (a.Pods == 0) != (b.Pods == 0) {
			return a.Pods == 0
		}
		if a.Utilization != b.Utilization {
			return a.Utilization < b.Utilization
		}
		if a.CreatedUnix != b.CreatedUnix {
			return a.CreatedUnix > b.CreatedUnix
		}
		return a.Name < b.Name
	})
	return out
}

func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}
