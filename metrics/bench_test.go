package metrics_test

import (
	"testing"

	"github.com/agentserve/sessionaffinity/metrics"
)

func BenchmarkCountersHit(b *testing.B) {
	c := metrics.NewCounters()
	for _, t := range []string{"gold", "silver", "bronze", "free"} {
		c.Miss(t)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Hit("silver")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Hit("silver")
			}
		})
	})
}

func BenchmarkNoopHit(b *testing.B) {
	var r metrics.Recorder = metrics.Noop{}
	b.ReportAllocs()
	for b.Loop() {
		r.Hit("silver")
	}
}

// The adapters' steady path: a known tier, and a folded one once the label set is full.
func BenchmarkTierLabelsResolve(b *testing.B) {
	l, err := metrics.NewTierLabels(metrics.TierLabelsConfig{MaxTiers: 4}, func(label string) *string { return &label })
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []string{"gold", "silver", "bronze", "free"} {
		l.Resolve(t)
	}
	for _, tier := range []string{"silver", "folded"} {
		b.Run(tier, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.Resolve(tier)
			}
		})
	}
}
