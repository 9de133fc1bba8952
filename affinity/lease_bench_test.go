package affinity_test

import (
	"fmt"
	"testing"

	"github.com/agentserve/sessionaffinity/internal/benchmin"

	"github.com/agentserve/sessionaffinity/affinity"
)

// BenchmarkLeaseHit compares the hit path of SelectBackend ("select") with Acquire+Done
// on the same bound sessions: load awareness off ("acquire-off"), on with idle backends
// ("acquire-on"), and on with every backend busy ("acquire-on-busy": 100 open leases
// spread over the backends, so each hit reads every candidate's load and checks the
// bound). Compare with benchstat, -count >= 6.
func BenchmarkLeaseHit(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	for _, n := range []int{8, 64} {
		bs := backends(b, n)
		for _, mode := range []string{"select", "acquire-off", "acquire-on", "acquire-on-busy"} {
			cfg := affinity.Config{}
			if mode == "acquire-on" || mode == "acquire-on-busy" {
				cfg = loadCfg(1.25, 1)
			}
			s := newBenchScheduler(b, cfg)
			for _, id := range ids {
				if _, _, err := s.SelectBackend(id, "", bs); err != nil {
					b.Fatal(err)
				}
			}
			if mode == "acquire-on-busy" {
				for i := range 100 {
					if _, err := acquire(s, fmt.Sprintf("bg%d", i), "", bs, 1000); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Run(fmt.Sprintf("mode=%s/cands=%d", mode, n), func(b *testing.B) {
				var l affinity.Lease // the caller's, reused
				benchmin.Batched(b, func(i int) {
					id := ids[i&(benchSessions-1)]
					if mode == "select" {
						if _, ok, err := s.SelectBackend(id, "", bs); !ok || err != nil {
							b.Fatal("not a hit", err)
						}
						return
					}
					err := s.Acquire(id, "", bs, 1000, &l)
					if err != nil || l.Outcome != affinity.OutcomeHit {
						b.Fatal("not a hit", l.Outcome, err)
					}
					l.Done(affinity.DoneInfo{})
				})
			})
		}
	}
}

// BenchmarkLeaseMiss compares first turns of new sessions: SelectBackend ("select") and
// Acquire+Done with the bounded-load walk over busy backends ("acquire-on-busy": 1,000
// open leases of varied cost, so the walk reads every load and sometimes passes the HRW
// winner by).
func BenchmarkLeaseMiss(b *testing.B) {
	const pool = 1 << 20
	ids := benchSessionIDs(pool)
	for _, n := range []int{8, 64} {
		bs := backends(b, n)
		for _, mode := range []string{"select", "acquire-on-busy"} {
			b.Run(fmt.Sprintf("mode=%s/cands=%d", mode, n), func(b *testing.B) {
				cfg := affinity.Config{MaxBindings: 1 << 16}
				if mode != "select" {
					cfg.Load = loadCfg(1.25, 1).Load
				}
				s := newBenchScheduler(b, cfg)
				for i := range 1000 {
					if _, err := acquire(s, fmt.Sprintf("bg%d", i), "", bs, int64(100+i%7*300)); err != nil {
						b.Fatal(err)
					}
				}
				for i := range 1 << 16 { // fill to the cap: every insert then evicts
					_, _, _ = s.SelectBackend(ids[pool-1-i], "", bs)
				}
				const usable = pool - 1<<16
				b.ResetTimer() // the fill above is setup
				var l affinity.Lease
				benchmin.Batched(b, func(i int) {
					id := ids[i%usable]
					if mode == "select" {
						if _, hit, err := s.SelectBackend(id, "", bs); hit || err != nil {
							b.Fatal("not a miss", err)
						}
						return
					}
					err := s.Acquire(id, "", bs, 1000, &l)
					if err != nil || l.Outcome != affinity.OutcomeMiss {
						b.Fatal("not a miss", l.Outcome, err)
					}
					l.Done(affinity.DoneInfo{})
				})
			})
		}
	}
}
