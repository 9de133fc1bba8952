package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentserve/sessionaffinity/affinity"
)

// vLLM's queue gauges, read by [Gateway.ReportLoads].
const (
	vllmWaiting = "vllm:num_requests_waiting"
	vllmRunning = "vllm:num_requests_running"
	vllmKVCache = "vllm:kv_cache_usage_perc"
)

// maxMetricsBytes bounds a backend's /metrics page read by ReportLoads.
const maxMetricsBytes = 4 << 20

// ReportLoads reads every backend's /metrics page (Prometheus text format) and reports
// its vLLM queue gauges — vllm:num_requests_waiting, vllm:num_requests_running (summed
// over their series, e.g. per model) and vllm:kv_cache_usage_perc (the largest) — to the
// scheduler with affinity.Scheduler.ReportLoad. A backend whose page cannot be read, or
// has neither queue gauge, gets its report cleared. Each read uses the health checker's
// HTTP client (health.timeout_seconds). [Gateway.Run] calls it every
// load_report_seconds when that is > 0. Safe for concurrent use.
func (g *Gateway) ReportLoads(ctx context.Context) {
	rt := g.state()
	for _, b := range rt.backends {
		l, err := g.scrapeLoad(ctx, b)
		if err != nil {
			g.log.Debug("backend load report failed", "backend", b.id, "err", err)
		}
		if err := rt.sched.ReportLoad(b.id, l); err != nil {
			g.log.Warn("backend load report rejected", "backend", b.id, "err", err)
		}
	}
}

func (g *Gateway) scrapeLoad(ctx context.Context, b *backend) (affinity.BackendLoad, error) {
	var l affinity.BackendLoad
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(b.url.String(), "/")+"/metrics", nil)
	if err != nil {
		return l, err
	}
	resp, err := g.checker.Do(req)
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return l, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return l, err
	}
	sum := func(name string) (float64, bool) {
		mf, ok := mfs[name]
		if !ok {
			return 0, false
		}
		var v float64
		for _, m := range mf.GetMetric() {
			v += m.GetGauge().GetValue()
		}
		return v, true
	}
	w, okW := sum(vllmWaiting)
	r, okR := sum(vllmRunning)
	if !okW && !okR {
		return l, fmt.Errorf("no %s or %s on /metrics", vllmWaiting, vllmRunning)
	}
	l.Waiting, l.Running = count(w), count(r)
	if mf, ok := mfs[vllmKVCache]; ok {
		for _, m := range mf.GetMetric() {
			if v := m.GetGauge().GetValue(); v > l.KVCache { // NaN never is
				l.KVCache = min(v, 1)
			}
		}
	}
	return l, nil
}

// count converts a gauge value to a request count: NaN and negatives are 0.
func count(v float64) int64 {
	if !(v > 0) {
		return 0
	}
	return int64(min(v, 1<<53))
}
