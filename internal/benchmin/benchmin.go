// Package benchmin is the benchmarks' shared loop: it times batches of operations and
// reports the fastest batch beside ns/op. For this module's benchmarks only.
package benchmin

import (
	"testing"
	"time"
)

// Batch is the number of operations timed together.
const Batch = 256

// Batched runs op(i) for i in [0, b.N) in batches of [Batch] and reports, beside ns/op,
// the fastest full batch's time per op as "min-ns/op". On a shared machine other
// processes' time slices inflate the mean (and its spread) but rarely the fastest batch,
// so min-ns/op ratios between benchmarks of one run are the stable ones. Serial
// benchmarks only; it calls b.ReportAllocs. Cost: two clock reads per batch.
func Batched(b *testing.B, op func(i int)) {
	b.Helper()
	b.ReportAllocs()
	best := time.Duration(1<<63 - 1)
	for i := 0; i < b.N; {
		n := min(Batch, b.N-i)
		t0 := time.Now()
		for j := i; j < i+n; j++ {
			op(j)
		}
		if d := time.Since(t0); n == Batch && d < best {
			best = d
		}
		i += n
	}
	if best < time.Duration(1<<63-1) {
		b.ReportMetric(float64(best)/Batch, "min-ns/op")
	}
}
