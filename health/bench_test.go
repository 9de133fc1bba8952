package health_test

import (
	"fmt"
	"testing"

	"github.com/agentserve/sessionaffinity/health"
)

func BenchmarkSetState(b *testing.B) {
	for _, n := range []int{0, 4} {
		b.Run(fmt.Sprintf("nonhealthy=%d", n), func(b *testing.B) {
			var s health.Set
			for i := range n {
				s.Set(fmt.Sprintf("vllm-%d", i), health.State(1+i%2))
			}
			ids := []string{"vllm-0", "vllm-1", "vllm-5", "vllm-7"}
			b.ReportAllocs()
			var sink health.State
			i := 0
			for b.Loop() {
				sink += s.State(ids[i&3])
				i++
			}
			_ = sink
		})
	}
}

func BenchmarkSetAllHealthy(b *testing.B) {
	var s health.Set
	b.ReportAllocs()
	for b.Loop() {
		_ = s.AllHealthy()
	}
}
