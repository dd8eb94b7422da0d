package autoscaler

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Prometheus metrics of the node autoscaler (served on the manager's /metrics).
var (
	decisionLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fke_autoscaler_scale_up_decision_seconds",
		Help:    "Time from a pod becoming unschedulable to the first decision that helps it: a scale-up for it, or a machine already coming up that it fits.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 60},
	}, []string{"cluster"})
	loopDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fke_autoscaler_loop_seconds",
		Help:    "Duration of one autoscaler pass over a cluster (snapshot and decisions).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"cluster"})
	unschedulablePods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fke_autoscaler_unschedulable_pods",
		Help: "Pods kube-scheduler could not place, at the last pass.",
	}, []string{"cluster"})
	unneededNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fke_autoscaler_unneeded_nodes",
		Help: "Nodes found unneeded at the last pass.",
	}, []string{"cluster"})
	scaleUps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fke_autoscaler_scaled_up_nodes_total",
		Help: "Nodes added by the autoscaler.",
	}, []string{"cluster", "nodepool"})
	scaleDowns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fke_autoscaler_scaled_down_nodes_total",
		Help: "Nodes removed by the autoscaler.",
	}, []string{"cluster", "nodepool"})
)

func init() {
	metrics.Registry.MustRegister(decisionLatency, loopDuration, unschedulablePods, unneededNodes, scaleUps, scaleDowns)
}
