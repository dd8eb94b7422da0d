package deploy

// FinalChecks is how many of the wait's checks (one every two seconds)
// must see a final problem before a deploy stops waiting: one sighting
// could be a registry's passing confusion, two are the kubelet's answer.
const FinalChecks = 2

// finalTracker counts, per object and problem, the checks that saw a
// final problem (no I/O).
type finalTracker struct {
	seen map[string]int
}

// observe records one check of an object and returns its final problems
// seen on FinalChecks checks so far (not necessarily in a row: the kubelet
// alternates ErrImagePull, which names the cause, and a back-off that may
// not).
func (f *finalTracker) observe(object string, ps []Problem) []Problem {
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	var out []Problem
	for _, p := range ps {
		if !p.Final {
			continue
		}
		k := object + "\x00" + p.Key
		f.seen[k]++
		if f.seen[k] >= FinalChecks {
			out = append(out, p)
		}
	}
	return out
}
