package affinity_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

// fillMillion binds 1,000,000 sessions (36-byte IDs) over bs through SelectBackend.
func fillMillion(b *testing.B, s *affinity.Scheduler, bs []affinity.Backend) {
	b.Helper()
	for i := range 1_000_000 {
		if _, _, err := s.SelectBackend(sessionID(i), "", bs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOnBackendDown1M: dropping one of 64 backends from a table of 1,000,000
// bindings (about 15,600 removed per op). Run with -benchtime=1x (or small N).
func BenchmarkOnBackendDown1M(b *testing.B) {
	bs := backends(b, 64)
	s := newBenchScheduler(b, affinity.Config{})
	fillMillion(b, s, bs)
	b.ReportAllocs()
	removed := 0
	b.ResetTimer()
	best := time.Duration(1<<63 - 1)
	for i := range b.N {
		id := bs[i%64].ID()
		t0 := time.Now()
		removed += s.OnBackendDown(id)
		best = min(best, time.Since(t0))
		b.StopTimer()
		s.OnBackendUp(id)
		if i%64 == 63 {
			fillMillion(b, s, bs)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(removed)/float64(b.N), "removed/op")
	b.ReportMetric(float64(best), "min-ns/op")
}

// BenchmarkBaselineDeleteList1M is OnBackendDown1M's baseline: a map of 1,000,000
// bindings under a sync.Mutex with, per backend, a precomputed list of its session keys;
// dropping a backend deletes the keys on its list (reinserted, untimed, after each op).
// Also reports the fastest op as min-ns/op (run with -benchtime=16x or so for that).
func BenchmarkBaselineDeleteList1M(b *testing.B) {
	bs := backends(b, 64)
	nodes := make([]hrw.Node, len(bs))
	for i := range bs {
		nodes[i] = bs[i].Node()
	}
	type entry struct {
		backend string
		lastUse int64
	}
	var mu sync.Mutex
	m := make(map[string]entry, 1_000_000)
	lists := make(map[string][]string, len(bs))
	for i := range 1_000_000 {
		id := sessionID(i)
		w := nodes[hrw.Pick(hrw.KeyHash(id), nodes)].ID()
		m[id] = entry{backend: w, lastUse: 1}
		lists[w] = append(lists[w], id)
	}
	b.ReportAllocs()
	removed := 0
	b.ResetTimer()
	best := time.Duration(1<<63 - 1)
	for i := range b.N {
		id := bs[i%64].ID()
		t0 := time.Now()
		mu.Lock()
		for _, k := range lists[id] {
			delete(m, k)
		}
		mu.Unlock()
		best = min(best, time.Since(t0))
		removed += len(lists[id])
		b.StopTimer()
		for _, k := range lists[id] {
			m[k] = entry{backend: id, lastUse: 1}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(removed)/float64(b.N), "removed/op")
	b.ReportMetric(float64(best), "min-ns/op")
}

// BenchmarkOnBackendDown1MConcurrentSelects: while one goroutine drops 32 of 64 backends
// (500,000 bindings) one by one, another runs hit-path SelectBackend calls on a backend that
// is not dropped; reports how many completed during the drop and at what mean latency.
func BenchmarkOnBackendDown1MConcurrentSelects(b *testing.B) {
	bs := backends(b, 64)
	keep := bs[63:]
	ids := benchSessionIDs(benchSessions)
	var during, dropNs int64
	for range b.N {
		b.StopTimer()
		s := newBenchScheduler(b, affinity.Config{})
		fillMillion(b, s, bs)
		for _, id := range ids {
			_, _, _ = s.SelectBackend(id, "", keep)
		}
		b.StartTimer()
		var stop atomic.Bool
		var n atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, hit, _ := s.SelectBackend(ids[i&(benchSessions-1)], "", keep); hit {
					n.Add(1)
				}
			}
		}()
		start := time.Now()
		for _, bk := range bs[:32] {
			s.OnBackendDown(bk.ID())
		}
		el := time.Since(start)
		stop.Store(true)
		wg.Wait()
		during += n.Load()
		dropNs += int64(el)
	}
	b.ReportMetric(float64(during)/float64(b.N), "selects-during-drop/op")
	b.ReportMetric(float64(dropNs)/float64(during), "ns/select-during-drop")
}

// BenchmarkMemoryPerBinding: heap bytes per binding at 1,000,000 bindings with 36-byte
// session IDs, key included (HeapAlloc delta after GC / n). Run with -benchtime=1x.
func BenchmarkMemoryPerBinding(b *testing.B) {
	bs := backends(b, 64)
	var per float64
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := newBenchScheduler(b, affinity.Config{})
		fillMillion(b, s, bs)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != 1_000_000 {
			b.Fatalf("len %d", s.Len())
		}
		per = float64(after.HeapAlloc-before.HeapAlloc) / 1e6
		runtime.KeepAlive(s)
	}
	b.ReportMetric(per, "B/binding")
}

// BenchmarkOnBackendDown1MSmallBackend: dropping a backend that holds 10 of 1,000,010
// bindings: the cost follows its own bindings (plus one lock per shard), not the table.
func BenchmarkOnBackendDown1MSmallBackend(b *testing.B) {
	bs := backends(b, 64)
	s := newBenchScheduler(b, affinity.Config{})
	fillMillion(b, s, bs)
	tiny := []affinity.Backend{affinity.MustBackend("tiny", "", 1)}
	b.ReportAllocs()
	removed := 0
	for b.Loop() {
		b.StopTimer()
		s.OnBackendUp("tiny")
		for i := range 10 {
			_, _, _ = s.SelectBackend(fmt.Sprintf("tiny-%d", i), "", tiny)
		}
		b.StartTimer()
		removed += s.OnBackendDown("tiny")
	}
	b.ReportMetric(float64(removed)/float64(b.N), "removed/op")
}
