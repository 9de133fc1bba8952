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

// BenchmarkSetBulkWrites times n writes that each store a new ID (a whole fleet marked
// Down one backend at a time, as a prober reports it) and Retain(nil) forgetting them:
// one op is the whole bulk. Each write copies the map (copy-on-write, see Set), so the
// bulk is O(n²) (tester37 finding 5).
func BenchmarkSetBulkWrites(b *testing.B) {
	for _, n := range []int{1000, 3000} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("pod-%d", i)
		}
		b.Run(fmt.Sprintf("markdown/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				var s health.Set
				for _, id := range ids {
					s.MarkDown(id)
				}
			}
		})
		b.Run(fmt.Sprintf("retain-nil/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				var s health.Set
				for _, id := range ids {
					s.MarkDown(id)
				}
				b.StartTimer()
				s.Retain(nil)
			}
		})
	}
}
