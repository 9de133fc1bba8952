package affinity_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/agentserve/sessionaffinity/affinity"
)

// BenchmarkLoadRecordBytes measures what the load records of distinct backend IDs cost
// (they are never removed while the Scheduler lives: package documentation, "Load
// records"): it leases (LeaseBackend, then Done) once on each of n backends never seen
// before, with IDs of 10 bytes ("pod-123456") whose strings the records keep, and reports
// the live heap it adds per ID after a GC (B/id), the record, its share of the index and
// the ID string together. Run: go test -run '^$' -bench LoadRecordBytes -benchtime 1x
// ./affinity/.
func BenchmarkLoadRecordBytes(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			for b.Loop() {
				s, err := affinity.New(affinity.Config{})
				if err != nil {
					b.Fatal(err)
				}
				before := heapInUse()
				for i := range n {
					be, err := affinity.NewBackend(fmt.Sprintf("pod-%06d", i), "", 1)
					if err != nil {
						b.Fatal(err)
					}
					var l affinity.Lease
					if err := s.LeaseBackend(be, 100, &l); err != nil {
						b.Fatal(err)
					}
					l.Done(affinity.DoneInfo{})
				}
				after := heapInUse() // what the Scheduler keeps of the n backends
				b.ReportMetric(float64(after-before)/float64(n), "B/id")
				runtime.KeepAlive(s)
			}
		})
	}
}

// heapInUse is the live heap after a full GC, in bytes.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
