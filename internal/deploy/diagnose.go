package deploy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ReasonNotTriggerScaleUp is the event fke's node autoscaler records on a
// pod that no node pool can take.
const ReasonNotTriggerScaleUp = "NotTriggerScaleUp"

// pullFailures are the container waiting reasons of an image that cannot
// be pulled.
var pullFailures = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}

// harmlessWaits are waiting reasons of a container on its way to running.
var harmlessWaits = []string{"", "ContainerCreating", "PodInitializing"}

// Problem is one reason an object is not Current.
type Problem struct {
	// Text says it, naming the pod (and how many more share it).
	Text string
	// Final is true when waiting will not cure it: an image the registry
	// says does not exist, an invalid image name, a Job that failed. A
	// crash loop, a pod no node can take yet or a registry that does not
	// answer may still come right, and are not final.
	Final bool
	// Key names the problem across checks, whose Text may change (the
	// kubelet alternates ErrImagePull and ImagePullBackOff; more replicas
	// join).
	Key string
}

// Diagnose explains why obj is not Current, from its status, its pods and
// the events of its namespace (pure). It returns one line per problem found,
// the most telling first; none when nothing explains it (the caller then
// shows kstatus' own message).
func Diagnose(obj *unstructured.Unstructured, pods []corev1.Pod, events []corev1.Event) []string {
	ps := Assess(obj, pods, events)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Text)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Assess is Diagnose with each problem's key and whether it is final
// (pure).
func Assess(obj *unstructured.Unstructured, pods []corev1.Pod, events []corev1.Event) []Problem {
	var out []Problem
	if obj.GetKind() == "Job" && obj.GroupVersionKind().Group == "batch" {
		if msg := jobFailed(obj); msg != "" {
			out = append(out, Problem{Text: msg, Final: true, Key: "job-failed"})
		}
	}
	if obj.GetKind() == "Deployment" {
		if c := findCondition(obj, "Progressing"); c != nil && c["status"] == "False" && c["reason"] == "ProgressDeadlineExceeded" {
			// Not final: the rollout goes on if its pods come up after all.
			out = append(out, Problem{Text: fmt.Sprintf("rollout stalled: %v", c["message"]), Key: "rollout-stalled"})
		}
	}
	var problems []podProblem
	for i := range pods {
		problems = append(problems, diagnosePod(&pods[i], events)...)
	}
	return append(out, groupProblems(problems)...)
}

// podProblem is one problem of one pod; the same problem of several pods
// (replicas of one Deployment) is reported once.
type podProblem struct {
	pod, text, key string
	final          bool
}

// groupProblems words each distinct problem once, naming the first pod
// that has it and how many more do; the group is final when one of its
// pods' problem is.
func groupProblems(ps []podProblem) []Problem {
	var order []string
	pods := map[string][]string{}
	first := map[string]podProblem{}
	final := map[string]bool{}
	for _, p := range ps {
		if _, ok := pods[p.text]; !ok {
			order = append(order, p.text)
			first[p.text] = p
		}
		if !slices.Contains(pods[p.text], p.pod) {
			pods[p.text] = append(pods[p.text], p.pod)
		}
		final[p.text] = final[p.text] || p.final
	}
	out := make([]Problem, 0, len(order))
	for _, text := range order {
		who := "pod " + pods[text][0]
		if n := len(pods[text]) - 1; n > 0 {
			who += fmt.Sprintf(" (and %d more)", n)
		}
		out = append(out, Problem{Text: who + ": " + text, Final: final[text], Key: first[text].key})
	}
	return out
}

func diagnosePod(p *corev1.Pod, events []corev1.Event) []podProblem {
	var out []podProblem
	add := func(key string, final bool, format string, args ...any) {
		out = append(out, podProblem{pod: p.Name, text: fmt.Sprintf(format, args...), key: key, final: final})
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			msg := "cannot be scheduled: " + strings.TrimSpace(c.Message)
			if ev := latestEvent(events, p, ReasonNotTriggerScaleUp); ev != nil {
				msg += "; node autoscaler: " + ev.Message
			}
			add("unschedulable", false, "%s", msg)
		}
	}
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil {
			switch {
			case slices.Contains(pullFailures, w.Reason):
				detail := pullDetail(w.Message, events, p)
				final := PullIsFinal(w.Reason, detail)
				if !final && w.Reason == "ImagePullBackOff" {
					// The back-off's own message may not repeat the cause;
					// the kubelet's latest Failed event does.
					if ev := latestEvent(events, p, "Failed"); ev != nil {
						final = PullIsFinal(w.Reason, ev.Message)
					}
				}
				add("image-pull "+cs.Name+" "+cs.Image, final, "image %s cannot be pulled (%s)%s", cs.Image, w.Reason, detail)
			case w.Reason == "CrashLoopBackOff":
				add("crash-loop "+cs.Name, false, "container %s is crash-looping (restarts: %d%s)", cs.Name, cs.RestartCount, lastExit(cs))
			case !slices.Contains(harmlessWaits, w.Reason):
				add("waiting "+cs.Name+" "+w.Reason, false, "container %s is waiting: %s%s", cs.Name, w.Reason, colon(w.Message))
			}
		}
		if last := cs.LastTerminationState.Terminated; cs.State.Running != nil && cs.RestartCount > 0 && last != nil && last.ExitCode != 0 {
			// Between two crashes of a crash loop the container runs: the same
			// crash loop, told the same way.
			add("crash-loop "+cs.Name, false, "container %s is crash-looping (restarts: %d%s)", cs.Name, cs.RestartCount, lastExit(cs))
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && p.Spec.RestartPolicy != corev1.RestartPolicyNever {
			// Just crashed, before the kubelet's back-off says so: the same
			// crash loop, with this exit.
			add("crash-loop "+cs.Name, false, "container %s is crash-looping (restarts: %d%s)", cs.Name, cs.RestartCount, lastExit(cs))
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && p.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// A pod that never restarts: its Job (or owner) may make another,
			// so the pod alone is not final; a failed Job is.
			add("failed "+cs.Name, false, "container %s failed (exit code %d%s)", cs.Name, t.ExitCode, colon(t.Reason))
		}
	}
	return out
}

// PullIsFinal says whether a failed pull will fail again however often
// the kubelet retries it (pure), from the container's waiting reason and
// the kubelet's message: the image name is invalid, the pull policy
// forbids pulling an image the node lacks, or the registry answered that
// the repository or tag does not exist. A registry that does not answer,
// refuses the credentials (a pull Secret may come) or limits the rate is
// not final.
func PullIsFinal(reason, message string) bool {
	switch reason {
	case "InvalidImageName", "ErrImageNeverPull":
		return true
	case "ErrImagePull", "ImagePullBackOff":
	default:
		return false
	}
	m := strings.ToLower(message)
	for _, transient := range transientPull {
		if strings.Contains(m, transient) {
			return false
		}
	}
	for _, gone := range missingImage {
		if strings.Contains(m, gone) {
			return true
		}
	}
	return false
}

// missingImage are what registries and container runtimes say of an
// image that does not exist (the distribution spec's MANIFEST_UNKNOWN and
// NAME_UNKNOWN, containerd's "not found", Docker Hub's "repository does
// not exist").
var missingImage = []string{"not found", "manifest unknown", "name unknown", "does not exist", "invalid reference format"}

// transientPull are the words of a pull that may work when tried again.
var transientPull = []string{
	"timeout", "timed out", "connection refused", "connection reset", "no such host", "network is unreachable",
	"i/o timeout", "tls handshake", "too many requests", "toomanyrequests", "unauthorized", "authentication required",
	"denied", "forbidden", "service unavailable", "bad gateway", "internal server error", "eof",
}

// pullDetail is the kubelet's own message for a failed pull: the
// container status', or the latest Failed event's when the status has none.
func pullDetail(msg string, events []corev1.Event, p *corev1.Pod) string {
	if msg == "" {
		if ev := latestEvent(events, p, "Failed"); ev != nil {
			msg = ev.Message
		}
	}
	return colon(msg)
}

// lastExit tells the container's latest exit: the current state's when it
// has just ended, else the last termination's.
func lastExit(cs corev1.ContainerStatus) string {
	t := cs.State.Terminated
	if t == nil {
		t = cs.LastTerminationState.Terminated
	}
	if t == nil {
		return ""
	}
	s := fmt.Sprintf("; last exit code %d", t.ExitCode)
	if t.Reason != "" {
		s += " " + t.Reason
	}
	if m := strings.TrimSpace(t.Message); m != "" {
		s += ": " + m
	}
	return s
}

func jobFailed(obj *unstructured.Unstructured) string {
	c := findCondition(obj, string(batchv1.JobFailed))
	if c == nil || c["status"] != "True" {
		return ""
	}
	return fmt.Sprintf("job %s failed: %v%s", obj.GetName(), c["reason"], colon(fmt.Sprint(c["message"])))
}

func findCondition(obj *unstructured.Unstructured, t string) map[string]any {
	conds, _, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		return nil
	}
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == t {
			return m
		}
	}
	return nil
}

// latestEvent returns the newest event with reason about pod p.
func latestEvent(events []corev1.Event, p *corev1.Pod, reason string) *corev1.Event {
	var best *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Reason != reason || e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != p.Name || e.InvolvedObject.Namespace != p.Namespace {
			continue
		}
		if e.InvolvedObject.UID != "" && p.UID != "" && e.InvolvedObject.UID != p.UID {
			continue
		}
		if best == nil || eventTime(e).After(eventTime(best)) {
			best = e
		}
	}
	return best
}

// eventTime is when the event was last seen.
func eventTime(e *corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return e.CreationTimestamp.Time
}

func colon(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || s == "<nil>" {
		return ""
	}
	return ": " + s
}
