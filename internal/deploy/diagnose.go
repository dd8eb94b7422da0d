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

// Diagnose explains why obj is not Current, from its status, its pods and
// the events of its namespace (pure). It returns one line per problem found,
// the most telling first; none when nothing explains it (the caller then
// shows kstatus' own message).
func Diagnose(obj *unstructured.Unstructured, pods []corev1.Pod, events []corev1.Event) []string {
	var out []string
	if obj.GetKind() == "Job" && obj.GroupVersionKind().Group == "batch" {
		if msg := jobFailed(obj); msg != "" {
			out = append(out, msg)
		}
	}
	if obj.GetKind() == "Deployment" {
		if c := findCondition(obj, "Progressing"); c != nil && c["status"] == "False" && c["reason"] == "ProgressDeadlineExceeded" {
			out = append(out, fmt.Sprintf("rollout stalled: %v", c["message"]))
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
	pod, text string
}

// groupProblems words each distinct problem once, naming the first pod
// that has it and how many more do.
func groupProblems(ps []podProblem) []string {
	var order []string
	pods := map[string][]string{}
	for _, p := range ps {
		if _, ok := pods[p.text]; !ok {
			order = append(order, p.text)
		}
		if !slices.Contains(pods[p.text], p.pod) {
			pods[p.text] = append(pods[p.text], p.pod)
		}
	}
	out := make([]string, 0, len(order))
	for _, text := range order {
		who := "pod " + pods[text][0]
		if n := len(pods[text]) - 1; n > 0 {
			who += fmt.Sprintf(" (and %d more)", n)
		}
		out = append(out, who+": "+text)
	}
	return out
}

func diagnosePod(p *corev1.Pod, events []corev1.Event) []podProblem {
	var out []podProblem
	add := func(format string, args ...any) {
		out = append(out, podProblem{pod: p.Name, text: fmt.Sprintf(format, args...)})
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			msg := "cannot be scheduled: " + strings.TrimSpace(c.Message)
			if ev := latestEvent(events, p, ReasonNotTriggerScaleUp); ev != nil {
				msg += "; node autoscaler: " + ev.Message
			}
			add("%s", msg)
		}
	}
	statuses := append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil {
			switch {
			case slices.Contains(pullFailures, w.Reason):
				add("image %s cannot be pulled (%s)%s", cs.Image, w.Reason, pullDetail(w.Message, events, p))
			case w.Reason == "CrashLoopBackOff":
				add("container %s is crash-looping (restarts: %d%s)", cs.Name, cs.RestartCount, lastExit(cs))
			case !slices.Contains(harmlessWaits, w.Reason):
				add("container %s is waiting: %s%s", cs.Name, w.Reason, colon(w.Message))
			}
		}
		if last := cs.LastTerminationState.Terminated; cs.State.Running != nil && cs.RestartCount > 0 && last != nil && last.ExitCode != 0 {
			// Between two crashes of a crash loop the container runs: the same
			// crash loop, told the same way.
			add("container %s is crash-looping (restarts: %d%s)", cs.Name, cs.RestartCount, lastExit(cs))
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && p.Spec.RestartPolicy == corev1.RestartPolicyNever {
			add("container %s failed (exit code %d%s)", cs.Name, t.ExitCode, colon(t.Reason))
		}
	}
	return out
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

func lastExit(cs corev1.ContainerStatus) string {
	t := cs.LastTerminationState.Terminated
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
