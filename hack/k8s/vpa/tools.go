//go:build tools

// Package tools pins the upstream Vertical Pod Autoscaler (recommender,
// updater, admission controller) that the verticalPodAutoscaler addon runs.
// They are built into _output/bin by `make binaries`.
package tools

import (
	_ "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/admission-controller"
	_ "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender"
	_ "k8s.io/autoscaler/vertical-pod-autoscaler/pkg/updater"
)
