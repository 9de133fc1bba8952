package affinity

import (
	"fmt"
	"testing"

	"github.com/agentserve/sessionaffinity/hrw"
)

// BenchmarkPlace compares the placement of a new session alone, without the table:
// pick (the HRW winner, what SelectBackend places by) against walk (the bounded-load walk
// of Acquire with load awareness on) over busy backends (open leases of varied cost, as
// BenchmarkLeaseMiss), so the walk's own cost per candidate shows without the miss's
// table work around it.
func BenchmarkPlace(b *testing.B) {
	for _, n := range []int{8, 64} {
		cands := make([]Backend, n)
		for i := range cands {
			c, err := NewBackend(fmt.Sprintf("b%02d", i), fmt.Sprintf("http://10.0.0.%d:8000", i), 0)
			if err != nil {
				b.Fatal(err)
			}
			cands[i] = c
		}
		s, err := New(Config{Load: LoadConfig{BalanceFactor: 1.25, SpillCostWeight: SpillWeight(1)}})
		if err != nil {
			b.Fatal(err)
		}
		for i := range 1000 {
			if err := s.Acquire(fmt.Sprintf("bg%d", i), "", cands, int64(100+i%7*300), new(Lease)); err != nil {
				b.Fatal(err)
			}
		}
		khs := make([]uint64, 1<<12)
		for i := range khs {
			khs[i] = hrw.KeyHash(fmt.Sprintf("session-%d", i))
		}
		b.Run(fmt.Sprintf("mode=pick/cands=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if w, _, err := s.pick(khs[i&(len(khs)-1)], cands); w < 0 || err != nil {
					b.Fatal(w, err)
				}
			}
		})
		b.Run(fmt.Sprintf("mode=walk/cands=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if pl, err := s.walk(khs[i&(len(khs)-1)], cands, 1000, -1); pl.w < 0 || err != nil {
					b.Fatal(pl.w, err)
				}
			}
		})
	}
}
