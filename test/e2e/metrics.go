package e2e

import (
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeMetrics reads and parses the metrics a process serves at addr (host:port)/metrics.
func ScrapeMetrics(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return ParseMetrics(resp.Body)
}

// ParseMetrics parses the Prometheus text format.
func ParseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// SumMetric adds a family's samples (counters and gauges) whose labels include match.
func SumMetric(mf map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	total := 0.0
next:
	for _, m := range mf[name].GetMetric() {
		for k, v := range match {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}
