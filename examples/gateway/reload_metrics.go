package gateway

import "github.com/prometheus/client_golang/prometheus"

const (
	// MetricConfigReloads counts configuration reloads ([Gateway.Reload], SIGHUP,
	// -watch-config, [Gateway.ReloadFileFor]) by result: "applied" (a "config reloaded"
	// line), "unchanged" (the same config: "config unchanged"), "rejected" (a file that
	// could not be read or a config refused: the old one keeps serving). All three
	// series exist from the start, at 0.
	MetricConfigReloads = "agentserve_gateway_config_reloads_total"
	// MetricConfigLastReloadOK is 1 when the last reload was applied or unchanged (and
	// before any reload), 0 after a rejected one: the config file on disk is not the one
	// serving. As Prometheus's own prometheus_config_last_reload_successful, for the
	// same alert. No labels.
	MetricConfigLastReloadOK = "agentserve_gateway_config_last_reload_successful"
)

// Results of MetricConfigReloads.
const (
	reloadApplied   = "applied"
	reloadUnchanged = "unchanged"
	reloadRejected  = "rejected"
)

// reloadMetrics are MetricConfigReloads and MetricConfigLastReloadOK. Decision
// (tester46: a rejected reload was visible in the log only): counted for every trigger,
// with no trigger label, as an embedder's trigger words are its own.
type reloadMetrics struct {
	total *prometheus.CounterVec
	ok    prometheus.Gauge
}

func (m *reloadMetrics) register(reg prometheus.Registerer) error {
	m.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricConfigReloads,
		Help: "Configuration reloads by result: applied, unchanged (the same config), rejected (the old config keeps serving).",
	}, []string{"result"})
	for _, r := range []string{reloadApplied, reloadUnchanged, reloadRejected} {
		m.total.WithLabelValues(r)
	}
	m.ok = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricConfigLastReloadOK,
		Help: "1 when the last configuration reload was applied or unchanged (or none was tried), 0 after a rejected one.",
	})
	m.ok.Set(1)
	if err := reg.Register(m.total); err != nil {
		return err
	}
	return reg.Register(m.ok)
}

// count records one reload's result.
func (m *reloadMetrics) count(result string) {
	if m.total == nil {
		return
	}
	m.total.WithLabelValues(result).Inc()
	if result == reloadRejected {
		m.ok.Set(0)
	} else {
		m.ok.Set(1)
	}
}
