package affinity_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/internal/benchmin"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

const benchSessions = 4096 // hot set of the hit benchmarks (a power of two)

// parallelStart gives each RunParallel goroutine its own starting point in the session
// list, so that concurrent goroutines work on different sessions (as concurrent requests
// of a gateway do) instead of walking the same sessions in lockstep.
func parallelStart(next *atomic.Int64) int {
	return int(next.Add(1)) * 389 // 389 is prime: the goroutines' windows interleave
}

// parallelOffset is parallelStart for goroutine g of benchmin.Parallel.
func parallelOffset(g int) int { return (g + 1) * 389 }

// sessionID returns a 36-byte UUID-shaped session ID.
func sessionID(i int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i, i&0xffff, i&0xfff, (i>>12)&0xfff, int64(i)*2654435761)
}

func benchSessionIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = sessionID(i)
	}
	return ids
}

// Baseline: a bare map[string]T lookup under sync.RWMutex (read lock), same keys.
func BenchmarkBaselineRWMutexMap(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	type binding struct {
		backend string
		lastUse int64
	}
	var mu sync.RWMutex
	m := make(map[string]binding, len(ids))
	for _, id := range ids {
		m[id] = binding{backend: "b00", lastUse: 1}
	}
	lookup := func(id string) bool {
		mu.RLock()
		v, ok := m[id]
		mu.RUnlock()
		return ok && v.lastUse > 0
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if !lookup(ids[i&(benchSessions-1)]) {
				b.Fatal("miss")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for i := parallelStart(&next); pb.Next(); i++ {
				if !lookup(ids[i&(benchSessions-1)]) {
					b.Fatal("miss")
				}
			}
		})
	})
}

// Baseline for the hit path (the floor for a sliding TTL): a map[string]entry
// under one sync.Mutex whose lookup also writes the entry's last-use time, read from an
// atomic clock word as CoarseClock's is. "value" stores the entry back (a second hash, as
// a map of structs needs); "pointer" writes through a *entry (one hash): the faster of
// the two is the floor the README's ratios use.
func BenchmarkBaselineMutexMap(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	type entry struct {
		backend string
		lastUse int64
	}
	var now atomic.Int64
	now.Store(1)
	var mu sync.Mutex
	vals := make(map[string]entry, len(ids))
	ptrs := make(map[string]*entry, len(ids))
	for _, id := range ids {
		vals[id] = entry{backend: "b00", lastUse: 1}
		ptrs[id] = &entry{backend: "b00", lastUse: 1}
	}
	lookups := map[string]func(id string) bool{
		"value": func(id string) bool {
			mu.Lock()
			e, ok := vals[id]
			if ok {
				e.lastUse = now.Load()
				vals[id] = e
			}
			mu.Unlock()
			return ok
		},
		"pointer": func(id string) bool {
			mu.Lock()
			e, ok := ptrs[id]
			if ok {
				e.lastUse = now.Load()
			}
			mu.Unlock()
			return ok
		},
	}
	for _, kind := range []string{"value", "pointer"} {
		lookup := lookups[kind]
		b.Run(kind+"/serial", func(b *testing.B) {
			benchmin.Batched(b, func(i int) {
				if !lookup(ids[i&(benchSessions-1)]) {
					b.Fatal("miss")
				}
			})
		})
		b.Run(kind+"/parallel", func(b *testing.B) {
			benchmin.Parallel(b, runtime.GOMAXPROCS(0), func(g, i int) {
				if !lookup(ids[(parallelOffset(g)+i)&(benchSessions-1)]) {
					b.Fatal("miss")
				}
			})
		})
	}
}

func newBenchScheduler(b *testing.B, cfg affinity.Config, opts ...affinity.Option) *affinity.Scheduler {
	b.Helper()
	s, err := affinity.New(cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkHit: SelectBackend on bound sessions (the hit path), system clock and the
// coarse clock.
func BenchmarkHit(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	for _, clock := range []string{"sysclock", "coarseclock"} {
		for _, n := range []int{8, 64} {
			bs := backends(b, n)
			var opts []affinity.Option
			if clock == "coarseclock" {
				opts = append(opts, affinity.WithClock(runCoarseClock(b)))
			}
			s := newBenchScheduler(b, affinity.Config{}, opts...)
			for _, id := range ids {
				if _, _, err := s.SelectBackend(id, "", bs); err != nil {
					b.Fatal(err)
				}
			}
			hit := func(id string) {
				_, ok, err := s.SelectBackend(id, "", bs)
				if !ok || err != nil {
					b.Fatal("not a hit", err)
				}
			}
			b.Run(fmt.Sprintf("%s/cands=%d/serial", clock, n), func(b *testing.B) {
				benchmin.Batched(b, func(i int) { hit(ids[i&(benchSessions-1)]) })
			})
			b.Run(fmt.Sprintf("%s/cands=%d/parallel", clock, n), func(b *testing.B) {
				benchmin.Parallel(b, runtime.GOMAXPROCS(0), func(g, i int) {
					hit(ids[(parallelOffset(g)+i)&(benchSessions-1)])
				})
			})
		}
	}
}

// runCoarseClock starts a CoarseClock ticking every 10 ms for the rest of benchmark b
// (stopped by b.Cleanup).
func runCoarseClock(b *testing.B) *affinity.CoarseClock {
	cc := affinity.NewCoarseClock(10 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cc.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	return cc
}

// BenchmarkHitTierOverrides: the serial hit of BenchmarkHit (CoarseClock, 8 candidates)
// on a tier with its own TTL, under a Config without ("none") and with ("overrides") tier
// TTL overrides, which a miss looks the tier up in and a hit does not.
func BenchmarkHitTierOverrides(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	bs := backends(b, 8)
	cc := runCoarseClock(b)
	for _, name := range []string{"none", "overrides"} {
		var cfg affinity.Config
		if name == "overrides" {
			cfg.Tiers = map[string]affinity.TierConfig{
				"gold":  {StickyTTLSeconds: affinity.TTLSeconds(7200)},
				"batch": {StickyTTLSeconds: affinity.TTLSeconds(60)},
			}
		}
		s := newBenchScheduler(b, cfg, affinity.WithClock(cc))
		for _, id := range ids {
			if _, _, err := s.SelectBackend(id, "gold", bs); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			benchmin.Batched(b, func(i int) {
				if _, ok, err := s.SelectBackend(ids[i&(benchSessions-1)], "gold", bs); !ok || err != nil {
					b.Fatal("not a hit", err)
				}
			})
		})
	}
}

// BenchmarkHitPartitioned separates the two costs of BenchmarkHit's parallel variant: the
// hit's own work and the cache lines that both cores write (each hit locks its shard and
// moves its entry to the front of the shard's LRU list, so the lock's line and the
// entries go from core to core). The hot set is split by shard: the sessions of even and
// of odd shards (the top 6 bits of hrw.KeyHash choose one of the 64 shards, see [Table]).
// "parallel-mixed": each goroutine alternates between the halves, as BenchmarkHit's do;
// "parallel-split": goroutine g only hits the shards of parity g, so no line of a shard
// is written by both cores — the throughput the hit would reach if nothing were shared.
func BenchmarkHitPartitioned(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	bs := backends(b, 8)
	cc := runCoarseClock(b)
	s := newBenchScheduler(b, affinity.Config{}, affinity.WithClock(cc))
	var half [2][]string
	for _, id := range ids {
		if _, _, err := s.SelectBackend(id, "", bs); err != nil {
			b.Fatal(err)
		}
		p := int(hrw.KeyHash(id)>>58) & 1
		half[p] = append(half[p], id)
	}
	const n = 1024 // per half (each holds about 2,048)
	if len(half[0]) < n || len(half[1]) < n {
		b.Fatal("uneven halves")
	}
	hit := func(id string) {
		if _, ok, err := s.SelectBackend(id, "", bs); !ok || err != nil {
			b.Fatal("not a hit", err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		benchmin.Batched(b, func(i int) { hit(half[i&1][(i>>1)&(n-1)]) })
	})
	b.Run("parallel-mixed", func(b *testing.B) {
		benchmin.Parallel(b, 2, func(g, i int) { hit(half[(i^g)&1][(parallelOffset(g)+i>>1)&(n-1)]) })
	})
	b.Run("parallel-split", func(b *testing.B) {
		benchmin.Parallel(b, 2, func(g, i int) { hit(half[g][i&(n-1)]) })
	})
}

// BenchmarkHitOneDrained: the serial hit of BenchmarkHit (CoarseClock, 8 candidates) while
// a backend that is not among them is drained, so the health set is not all Healthy (a
// rolling restart, say) and the hit must know its backend's state.
func BenchmarkHitOneDrained(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	bs := backends(b, 8)
	cc := runCoarseClock(b)
	s := newBenchScheduler(b, affinity.Config{}, affinity.WithClock(cc))
	for _, id := range ids {
		if _, _, err := s.SelectBackend(id, "", bs); err != nil {
			b.Fatal(err)
		}
	}
	s.OnBackendDraining("not-a-candidate")
	benchmin.Batched(b, func(i int) {
		if _, ok, err := s.SelectBackend(ids[i&(benchSessions-1)], "", bs); !ok || err != nil {
			b.Fatal("not a hit", err)
		}
	})
}
