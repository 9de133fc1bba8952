package gateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/agentserve/sessionaffinity/metrics"
	otelaffinity "github.com/agentserve/sessionaffinity/metrics/otel"
	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
)

// Metrics exporters selectable with `metrics.exporter`.
const (
	// ExporterPrometheus records with the metrics/prometheus adapter (client_golang
	// counters): series agentserve_affinity_*_total{tier}. The default.
	ExporterPrometheus = "prometheus"
	// ExporterOTel records with the metrics/otel adapter on an OpenTelemetry SDK
	// MeterProvider whose reader is the OTel Prometheus exporter registered on the same
	// registry, so /metrics still serves them (agentserve_affinity_hits_total{tier,
	// otel_scope_name,...}). It needs no collector and works offline; to push OTLP
	// instead, embed the gateway with your own MeterProvider.
	ExporterOTel = "otel"
)

// MetricsConfig selects how the gateway exports the affinity metrics on /metrics.
type MetricsConfig struct {
	// Exporter is "prometheus" (default when empty) or "otel"; anything else is
	// [ErrMetricsExporter].
	Exporter string `yaml:"exporter"`
}

// newRecorder builds the affinity Recorder for exporter on reg and returns it and a
// function to wire the bindings gauge. The OTel path uses only a pull reader (the
// Prometheus exporter reads at scrape time), so its MeterProvider starts no goroutine
// and needs no shutdown.
func newRecorder(exporter string, reg *prometheus.Registry) (metrics.Recorder, func(func() int), error) {
	switch exporter {
	case "", ExporterPrometheus:
		rec, err := promaffinity.New(reg)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: prometheus recorder: %w", err)
		}
		return rec, rec.ObserveBindings, nil
	case ExporterOTel:
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: otel prometheus exporter: %w", err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
		rec, err := otelaffinity.New(mp)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: otel recorder: %w", err)
		}
		return rec, rec.ObserveBindings, nil
	}
	return nil, nil, invalid(ErrMetricsExporter, "metrics.exporter: %q: want %q or %q", exporter, ExporterPrometheus, ExporterOTel)
}
