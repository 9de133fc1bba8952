package otel_test

import (
	"testing"

	"github.com/agentserve/sessionaffinity/metrics"
)

func BenchmarkHit(b *testing.B) {
	rec, _ := newRecorderB(b)
	rec.Hit("gold")
	b.ReportAllocs()
	for b.Loop() {
		rec.Hit("gold")
	}
}

func BenchmarkBroken(b *testing.B) {
	rec, _ := newRecorderB(b)
	b.ReportAllocs()
	for b.Loop() {
		rec.Broken("gold", metrics.ReasonDown)
	}
}
