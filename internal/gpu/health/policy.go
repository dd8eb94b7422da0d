// Package health decides whether each GPU is usable. The decision code is
// pure: a versioned XID policy classifies NVML events, and a per-device
// state machine (Tracker) moves a GPU between Healthy and Unhealthy with an
// injected clock. Monitor feeds NVML events and re-probes into the Tracker and
// tells subscribers; a monitor that cannot run is reported, never silent.
package health

import (
	"fmt"
	"sort"

	"fke.dev/fke/internal/gpu/nvml"
)

// Class names why an event matters.
type Class string

const (
	// ClassApplication: caused by a user's program (e.g. XID 13, 31, 43); the GPU is fine.
	ClassApplication Class = "application"
	// ClassReset: the GPU needs a reset before it can be trusted again.
	ClassReset Class = "reset"
	// ClassReboot: the GPU needs the node rebooted (e.g. XID 79, fallen off the bus).
	ClassReboot Class = "reboot"
	// ClassUnknown: an XID the policy does not list.
	ClassUnknown Class = "unknown"
	// ClassCorrectable: a corrected (single-bit) ECC error.
	ClassCorrectable Class = "correctable"
)

// Action is what the policy says to do with a device.
type Action string

const (
	ActionIgnore    Action = "ignore"
	ActionUnhealthy Action = "unhealthy"
)

// Verdict is the policy's decision for one event.
type Verdict struct {
	Class  Class
	Action Action
	// Reason is a short machine-friendly reason, e.g. "XID79".
	Reason string
}

// Policy classifies XID and ECC events. Its Version is reported with every
// decision so that a change of policy is visible.
type Policy struct {
	Version string
	// Application XIDs are ignored.
	Application map[uint64]bool
	// Reset and Reboot XIDs mark the device unhealthy.
	Reset  map[uint64]bool
	Reboot map[uint64]bool
	// Unknown is the action for XIDs in no list.
	Unknown Action
}

// DefaultPolicyVersion names DefaultPolicy.
const DefaultPolicyVersion = "fke-xid/v1"

// DefaultPolicy ignores application-level XIDs (13, 31, 43, 45, 68, 109),
// marks reset- and reboot-class XIDs unhealthy, and treats unknown XIDs as
// unhealthy too: recovery is automatic once NVML says the GPU is usable, so
// erring on the side of draining is cheap.
func DefaultPolicy() Policy {
	return Policy{
		Version:     DefaultPolicyVersion,
		Application: set(13, 31, 43, 45, 68, 109),
		Reset:       set(48, 63, 74, 92, 94, 95, 119, 120),
		Reboot:      set(64, 79),
		Unknown:     ActionUnhealthy,
	}
}

// WithIgnored returns a copy of p that also ignores xids.
func (p Policy) WithIgnored(xids ...uint64) Policy {
	out := p
	out.Application = map[uint64]bool{}
	for k, v := range p.Application {
		out.Application[k] = v
	}
	for _, x := range xids {
		out.Application[x] = true
	}
	if len(xids) > 0 {
		ids := append([]uint64(nil), xids...)
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		out.Version = fmt.Sprintf("%s+ignore%v", p.Version, ids)
	}
	return out
}

// Classify decides what an event means for its device.
func (p Policy) Classify(ev nvml.Event) Verdict {
	switch ev.Kind {
	case nvml.EventECCDoubleBit:
		return Verdict{Class: ClassReset, Action: ActionUnhealthy, Reason: "ECCDoubleBit"}
	case nvml.EventECCSingleBit:
		return Verdict{Class: ClassCorrectable, Action: ActionIgnore, Reason: "ECCSingleBit"}
	case nvml.EventXID:
	default:
		return Verdict{Class: ClassUnknown, Action: ActionIgnore, Reason: "UnknownEvent"}
	}
	reason := fmt.Sprintf("XID%d", ev.XID)
	switch {
	case p.Application[ev.XID]:
		return Verdict{Class: ClassApplication, Action: ActionIgnore, Reason: reason}
	case p.Reboot[ev.XID]:
		return Verdict{Class: ClassReboot, Action: ActionUnhealthy, Reason: reason}
	case p.Reset[ev.XID]:
		return Verdict{Class: ClassReset, Action: ActionUnhealthy, Reason: reason}
	default:
		a := p.Unknown
		if a == "" {
			a = ActionUnhealthy
		}
		return Verdict{Class: ClassUnknown, Action: a, Reason: reason}
	}
}

func set(xs ...uint64) map[uint64]bool {
	m := make(map[uint64]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
