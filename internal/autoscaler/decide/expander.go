package decide

import (
	"fmt"
	"math/rand/v2"
)

// ParseExpander validates an expander name ("" means least-waste).
func ParseExpander(s string) (ExpanderName, error) {
	switch n := ExpanderName(s); n {
	case "":
		return ExpanderLeastWaste, nil
	case ExpanderLeastWaste, ExpanderPrice, ExpanderPriority, ExpanderRandom:
		return n, nil
	}
	return "", fmt.Errorf("unknown expander %q (want %s, %s, %s or %s)", s,
		ExpanderLeastWaste, ExpanderPrice, ExpanderPriority, ExpanderRandom)
}

const epsilon = 1e-9

// choose picks one of the options (at least one) with the expander.
func (su *scaleUp) choose(options []*option) *option {
	switch su.expander.Name {
	case ExpanderRandom:
		r := su.expander.Rand
		if r == nil {
			seed := uint64(su.now.UnixNano())
			r = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		}
		return options[r.IntN(len(options))]
	case ExpanderPrice:
		return best(options, func(a, b *option) int {
			if c := su.comparePrice(a, b); c != 0 {
				return c
			}
			return su.compareWaste(a, b)
		})
	case ExpanderPriority:
		return best(options, func(a, b *option) int {
			pa, pb := su.pools[a.pool].Priority, su.pools[b.pool].Priority
			if pa != pb {
				if pa > pb {
					return -1
				}
				return 1
			}
			return su.compareWaste(a, b)
		})
	default:
		return best(options, su.compareWaste)
	}
}

// best returns the first option no other option beats (cmp < 0: a is
// better).
func best(options []*option, cmp func(a, b *option) int) *option {
	b := options[0]
	for _, o := range options[1:] {
		if cmp(o, b) < 0 {
			b = o
		}
	}
	return b
}

func compareFloat(a, b float64) int {
	switch {
	case a < b-epsilon:
		return -1
	case a > b+epsilon:
		return 1
	}
	return 0
}

// compareWaste ranks least-waste: less unused GPU first, then less unused
// cpu and memory, then more pods helped, fewer nodes, pool name.
func (su *scaleUp) compareWaste(a, b *option) int {
	if c := compareFloat(a.gpuWaste, b.gpuWaste); c != 0 {
		return c
	}
	if c := compareFloat(a.cpuMemWaste, b.cpuMemWaste); c != 0 {
		return c
	}
	if len(a.pods) != len(b.pods) {
		if len(a.pods) > len(b.pods) {
			return -1
		}
		return 1
	}
	if len(a.nodes) != len(b.nodes) {
		if len(a.nodes) < len(b.nodes) {
			return -1
		}
		return 1
	}
	switch na, nb := su.pools[a.pool].Name, su.pools[b.pool].Name; {
	case na < nb:
		return -1
	case na > nb:
		return 1
	}
	return 0
}

// comparePrice ranks by price per pod helped (lower first); a pool with an
// unknown price (0) loses to any priced one; equal prices per pod go to the
// option helping more pods.
func (su *scaleUp) comparePrice(a, b *option) int {
	pa, pb := su.pools[a.pool].PricePerHour, su.pools[b.pool].PricePerHour
	if (pa > 0) != (pb > 0) {
		if pa > 0 {
			return -1
		}
		return 1
	}
	ca := pa * float64(len(a.nodes)) / float64(len(a.pods))
	cb := pb * float64(len(b.nodes)) / float64(len(b.pods))
	if c := compareFloat(ca, cb); c != 0 {
		return c
	}
	if len(a.pods) != len(b.pods) {
		if len(a.pods) > len(b.pods) {
			return -1
		}
		return 1
	}
	return 0
}
