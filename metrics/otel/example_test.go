package otel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentserve/sessionaffinity/affinity"
	otelaffinity "github.com/agentserve/sessionaffinity/metrics/otel"
)

// Give the adapter your MeterProvider (here the SDK's, with a ManualReader standing in
// for an OTLP or Prometheus exporter) and pass it to the Scheduler as its Recorder.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	rec, err := otelaffinity.New(mp, otelaffinity.WithTiers("interactive"))
	if err != nil {
		panic(err)
	}
	defer rec.Close()
	sched, err := affinity.New(affinity.Config{}, affinity.WithRecorder(rec))
	if err != nil {
		panic(err)
	}
	rec.ObserveBindings(sched.Len)

	// One session, six turns: the first misses, the next five hit.
	backends := []affinity.Backend{affinity.MustBackend("vllm-0", "http://10.0.0.1:8000", 1), affinity.MustBackend("vllm-1", "http://10.0.0.2:8000", 1)}
	for range 6 {
		if _, _, err := sched.SelectBackend("session-1", "interactive", backends); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				tier, _ := p.Attributes.Value("tier")
				fmt.Printf("%s{tier=%s} %d\n", m.Name, tier.AsString(), p.Value)
			}
		case metricdata.Gauge[int64]:
			fmt.Printf("%s %d\n", m.Name, d.DataPoints[0].Value)
		}
	}
	// Unordered output:
	// agentserve.affinity.misses{tier=interactive} 1
	// agentserve.affinity.hits{tier=interactive} 5
	// agentserve.affinity.bindings 1
}
