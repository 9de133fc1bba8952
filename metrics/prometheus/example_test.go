package prometheus_test

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/metrics"
	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
)

// Register the adapter on your own registry, pass it to the Scheduler as its Recorder
// (affinity.WithRecorder(rec)) and serve reg with promhttp.HandlerFor. Here the
// Scheduler's events are simulated by calling the Recorder directly.
func Example() {
	reg := prometheus.NewRegistry()
	rec, err := promaffinity.New(reg, promaffinity.WithTiers("interactive"))
	if err != nil {
		panic(err)
	}
	rec.ObserveBindings(func() int { return 1 }) // e.g. sched.Len

	// One session, six turns: the first misses, the next five hit.
	rec.Miss("interactive")
	for range 5 {
		rec.Hit("interactive")
	}
	rec.Miss("batch") // not allow-listed: counted as tier="other"
	rec.Broken("", metrics.ReasonDown)

	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if v == 0 {
				continue // every label's series exists from its first event, at 0
			}
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			fmt.Printf("%s{%s} %g\n", mf.GetName(), strings.Join(labels, ","), v)
		}
	}
	// Output:
	// agentserve_affinity_bindings{} 1
	// agentserve_affinity_broken_total{reason="down",tier="default"} 1
	// agentserve_affinity_hits_total{tier="interactive"} 5
	// agentserve_affinity_misses_total{tier="interactive"} 1
	// agentserve_affinity_misses_total{tier="other"} 1
}
