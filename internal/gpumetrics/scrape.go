package gpumetrics

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Labels of the agent's series (as the DCGM exporter names them).
const (
	labelUUID      = "UUID"
	labelPod       = "pod"
	labelNamespace = "namespace"
)

// ParseAgent reads one scrape of fke-gpu-agent's /metrics (the Prometheus
// text format) and returns, for every pod holding a GPU, the metrics of
// each of its GPUs. A GPU held by several containers of one pod counts
// once; a GPU shared by several pods (time-slicing) counts for each of
// them with the whole GPU's figures, as the agent reports it. Series
// without a pod label (idle GPUs) are skipped.
func ParseAgent(r io.Reader) (map[PodKey]PerGPU, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing GPU agent metrics: %w", err)
	}
	out := map[PodKey]PerGPU{}
	for _, m := range Metrics {
		fam, ok := families[m.Name]
		if !ok {
			continue
		}
		for _, s := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			pod, ns, uuid := labels[labelPod], labels[labelNamespace], labels[labelUUID]
			if pod == "" || ns == "" || uuid == "" {
				continue
			}
			v, ok := sampleValue(s)
			if !ok {
				continue
			}
			k := PodKey{Namespace: ns, Name: pod}
			if out[k] == nil {
				out[k] = PerGPU{}
			}
			if out[k][uuid] == nil {
				out[k][uuid] = map[string]float64{}
			}
			out[k][uuid][m.Name] = v
		}
	}
	return out, nil
}

func sampleValue(s *dto.Metric) (float64, bool) {
	switch {
	case s.GetGauge() != nil:
		return s.GetGauge().GetValue(), true
	case s.GetCounter() != nil:
		return s.GetCounter().GetValue(), true
	case s.GetUntyped() != nil:
		return s.GetUntyped().GetValue(), true
	}
	return 0, false
}
