// Package benchmin is the benchmarks' shared loop: it times batches of operations and
// reports the fastest batch beside ns/op. For this module's benchmarks only.
package benchmin

import (
	"runtime"
	"sync"
	"sync/atomic"
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

// Parallel runs op(g, i) on procs goroutines (g in [0, procs); i counts each goroutine's
// operations from 0) for b.N operations in all, in rounds: the goroutines start each
// round's [Batch] operations together (a spinning barrier) and the round lasts until the
// last of them is done. Beside ns/op it reports the fastest round's time divided by all
// its operations as "min-ns/op": the throughput of procs goroutines that ran at once, the
// figure to compare with a serial [Batched] min-ns/op (on a shared machine a round in
// which a goroutine lost its core is slow and never the fastest). It calls
// b.ReportAllocs. Cost: two clock reads and a barrier per round. op may call b.Fatal:
// the other goroutines then stop at the next barrier.
func Parallel(b *testing.B, procs int, op func(g, i int)) {
	b.Helper()
	b.ReportAllocs()
	rounds := max(1, b.N/(procs*Batch))
	var arrived, finished, round atomic.Int64
	best := time.Duration(1<<63 - 1)
	var wg sync.WaitGroup
	for g := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range int64(rounds) {
				arrived.Add(1)
				var t0 time.Time
				if g == 0 { // the coordinator starts the round when all have arrived
					for arrived.Load() < int64(procs)*(r+1) {
						if wait(b) {
							return
						}
					}
					t0 = time.Now()
					round.Store(r + 1)
				}
				for round.Load() <= r {
					if wait(b) {
						return
					}
				}
				for j := range Batch {
					op(g, int(r)*Batch+j)
				}
				finished.Add(1)
				if g == 0 {
					for finished.Load() < int64(procs)*(r+1) {
						if wait(b) {
							return
						}
					}
					best = min(best, time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	if !b.Failed() {
		b.ReportMetric(float64(best)/float64(procs*Batch), "min-ns/op")
	}
}

// wait yields in a barrier's spin and reports whether to give up: the benchmark failed
// (a goroutine that called b.Fatal never arrives).
func wait(b *testing.B) bool {
	runtime.Gosched()
	return b.Failed()
}
