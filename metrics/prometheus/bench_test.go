package prometheus_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/metrics"
	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
)

func benchRecorder(b *testing.B, opts ...promaffinity.Option) *promaffinity.Recorder {
	b.Helper()
	rec, err := promaffinity.New(prometheus.NewRegistry(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return rec
}

// The steady path: a tier already seen.
func BenchmarkHit(b *testing.B) {
	for _, tiers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("tiers=%d", tiers), func(b *testing.B) {
			rec := benchRecorder(b)
			names := make([]string, tiers)
			for i := range names {
				names[i] = fmt.Sprintf("tier-%d", i)
				rec.Hit(names[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rec.Hit(names[i%tiers])
			}
		})
	}
}

func BenchmarkBroken(b *testing.B) {
	rec := benchRecorder(b)
	rec.Hit("t")
	b.ReportAllocs()
	for b.Loop() {
		rec.Broken("t", metrics.ReasonNotCandidate)
	}
}

// A tier outside the allow-list: folded to "other" without a lock.
func BenchmarkHitFolded(b *testing.B) {
	rec := benchRecorder(b, promaffinity.WithTiers("a"))
	b.ReportAllocs()
	for b.Loop() {
		rec.Hit("not-allowed")
	}
}

func BenchmarkHitParallel(b *testing.B) {
	rec := benchRecorder(b)
	rec.Hit("t")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec.Hit("t")
		}
	})
}

// The metrics.Counters of the core module, for comparison.
func BenchmarkCoreCountersHit(b *testing.B) {
	c := metrics.NewCounters()
	c.Hit("t")
	b.ReportAllocs()
	for b.Loop() {
		c.Hit("t")
	}
}
