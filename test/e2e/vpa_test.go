package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/addons"
	"fke.dev/fke/internal/nodeprovider/kwok"
	"fke.dev/fke/test/testenv"
)

var vpaGVR = schema.GroupVersionResource{Group: "autoscaling.k8s.io", Version: "v1", Resource: "verticalpodautoscalers"}

// TestVerticalPodAutoscaler runs the upstream VPA as fke's addon on a
// cluster of kwok GPU nodes: a Deployment of two 1-GPU pods that request
// 10m CPU and 16Mi but use 300m and 200Mi (kwok's simulated usage, read by
// metrics-server) gets recommendations; in Recreate mode the updater
// evicts its pods and the admission controller gives the new ones the
// recommended requests, and never touches their GPU limits. Turned off,
// the addon leaves; pods are admitted unchanged.
func TestVerticalPodAutoscaler(t *testing.T) {
	t.Parallel() // its time is mostly waits: it runs beside another such test
	e := testenv.Up(t)
	ctx := context.Background()
	e.MustRun("cluster", "create", "vpa", "--vertical-pod-autoscaler", "--nodepool", "name=gpu,type=gpu-l4x1,replicas=2", "--wait")
	e.WaitAddon("vpa", addons.VPAName, fkev1.AddonReady, 2*time.Minute)
	cs := e.Tenant("vpa")
	dyn := dynamic.NewForConfigOrDie(e.TenantConfig("vpa"))

	labels := map[string]string{"app": "infer"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "infer"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					kwok.AnnotationUsageCPU: "300m", kwok.AnnotationUsageMemory: "200Mi",
				}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "server", Image: "registry.example/infer:1",
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
						Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
					},
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vpa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
		"metadata": map[string]any{"name": "infer"},
		"spec": map[string]any{
			"targetRef":    map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer"},
			"updatePolicy": map[string]any{"updateMode": "Recreate"},
		},
	}}
	if _, err := dyn.Resource(vpaGVR).Namespace("default").Create(ctx, vpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var target map[string]any
	testenv.Eventually(t, 3*time.Minute, "a recommendation", func() error {
		got, err := dyn.Resource(vpaGVR).Namespace("default").Get(ctx, "infer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		recs, _, _ := unstructured.NestedSlice(got.Object, "status", "recommendation", "containerRecommendations")
		if len(recs) == 0 {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			return fmt.Errorf("no recommendation yet (conditions %v)", conds)
		}
		target, _, _ = unstructured.NestedMap(recs[0].(map[string]any), "target")
		cpu := resource.MustParse(fmt.Sprint(target["cpu"]))
		if cpu.MilliValue() < 200 {
			return fmt.Errorf("target %v: CPU below the 300m used", target)
		}
		return nil
	})
	t.Logf("FIGURE VPA created -> recommendation %v: %s", target, time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	testenv.Eventually(t, 4*time.Minute, "pods recreated with the recommended requests", func() error {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=infer"})
		if err != nil {
			return err
		}
		updated := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			c := p.Spec.Containers[0]
			if gpu := c.Resources.Limits["nvidia.com/gpu"]; gpu.Value() != 1 {
				t.Fatalf("pod %s: GPU limit %s, want 1 (VPA must not touch it)", p.Name, gpu.String())
			}
			if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.MilliValue() >= 200 && strings.Contains(p.Annotations["vpaUpdates"], "cpu request") {
				updated++
			}
		}
		if updated < 2 {
			return fmt.Errorf("%d of %d running pods have the recommended requests", updated, len(pods.Items))
		}
		return nil
	})
	t.Logf("FIGURE recommendation -> both pods recreated with it (updater every 15 s): %s", time.Since(start).Round(100*time.Millisecond))

	t.Run("turned off, the VPA leaves and pods are admitted unchanged", func(t *testing.T) {
		e := e.For(t)
		c := e.Client()
		cl := e.Cluster("vpa")
		cl.Spec.Addons.VerticalPodAutoscaler.Enabled = false
		if err := c.Update(ctx, cl); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "addon gone", func() error {
			for _, a := range e.Cluster("vpa").Status.Addons {
				if a.Name == addons.VPAName {
					return fmt.Errorf("%s: %s", a.Phase, a.Message)
				}
			}
			if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, addons.VPAWebhookConfig, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("webhook %s still there", addons.VPAWebhookConfig)
			}
			return nil
		})
		if _, err := dyn.Resource(vpaGVR).Namespace("default").Get(ctx, "infer", metav1.GetOptions{}); err != nil {
			t.Errorf("the user's VPA object: %v (it must stay)", err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: labels}, Spec: dep.Spec.Template.Spec}
		got, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cpu := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; cpu.MilliValue() != 10 {
			t.Errorf("a pod created with the VPA off got %s CPU, want its own 10m", cpu.String())
		}
	})
}
