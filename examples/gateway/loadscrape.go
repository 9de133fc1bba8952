package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// vLLM's queue gauges, read by [Gateway.ReportLoads].
const (
	vllmWaiting = "vllm:num_requests_waiting"
	vllmRunning = "vllm:num_requests_running"
	vllmKVCache = "vllm:kv_cache_usage_perc"
)

// maxMetricsBytes bounds a backend's /metrics page read by ReportLoads.
const maxMetricsBytes = 4 << 20

// ReportLoads reads the /metrics page (Prometheus text format) of every backend that is
// not Down now, and reports its vLLM queue gauges — vllm:num_requests_waiting,
// vllm:num_requests_running (summed over their series, e.g. per model) and
// vllm:kv_cache_usage_perc (the largest) — to the scheduler with
// affinity.Scheduler.ReportLoad. A backend whose page cannot be read, or has neither
// queue gauge, gets its report cleared. Each read uses the health checker's HTTP client
// (health.timeout_seconds); at most 12 run at once, and ReportLoads returns when all
// have ended (at most about ceil(backends / 12) timeouts). [Gateway.Run] does not call
// it: with load_report_seconds > 0 it scrapes each backend on a schedule of its own
// (loadsched.go; see docs/load-aware.md, "Load report scrapes"). Safe for concurrent use.
func (g *Gateway) ReportLoads(ctx context.Context) {
	rt := g.state()
	work := make(chan *backend)
	var wg sync.WaitGroup
	for range min(scrapeWorkers, len(rt.backends)) {
		wg.Go(func() {
			for b := range work {
				l, err := g.scrapeLoad(ctx, b)
				g.recordScrape(b, l, err, false)
			}
		})
	}
	for _, b := range rt.backends {
		if rt.sched.Health().State(b.id) != health.Down {
			work <- b
		}
	}
	close(work)
	wg.Wait()
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
