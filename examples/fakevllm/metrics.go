package fakevllm

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const helpPrefix = "[fakevllm simulator, not vLLM] "

// initMetrics registers the vLLM-like series on the Server's own registry. Every series
// is read from the Server's counters at scrape time.
func (s *Server) initMetrics() error {
	s.registry = prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": s.cfg.Model, "backend": s.cfg.ID}
	counter := func(name, help string, fn func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: helpPrefix + help, ConstLabels: labels},
			func() float64 { return float64(fn()) })
	}
	gauge := func(name, help string, fn func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: helpPrefix + help, ConstLabels: labels}, fn)
	}
	collectors := []prometheus.Collector{
		gauge("fakevllm_simulator_info",
			"Always 1. This endpoint is served by fakevllm, a vLLM simulator for tests and demos; no model runs here.",
			func() float64 { return 1 }),
		counter("vllm:prefix_cache_queries_total",
			"Prefix cache queries, in terms of number of queried tokens.", s.queriedTokens.Load),
		counter("vllm:prefix_cache_hits_total",
			"Prefix cache hits, in terms of number of cached tokens.", s.cachedTokens.Load),
		counter("vllm:prompt_tokens_total", "Number of prefill tokens processed (simulated).", s.queriedTokens.Load),
		counter("vllm:generation_tokens_total", "Number of generation tokens processed (simulated).", s.completionTokens.Load),
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 {
			running, _ := s.slots.counts()
			return float64(running)
		}),
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 {
			_, waiting := s.slots.counts()
			return float64(waiting)
		}),
	}
	for _, c := range collectors {
		if err := s.registry.Register(c); err != nil {
			return err
		}
	}
	s.metrics = promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
	return nil
}
