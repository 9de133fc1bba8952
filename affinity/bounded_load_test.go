package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// TestBoundedLoadFlood: thousands of new sessions arrive while none completes, many of
// them hot keys (sessions whose HRW winner is the same backend). After every placement
// no backend holds more than balance_factor x the mean, unless it held nothing before.
func TestBoundedLoadFlood(t *testing.T) {
	for _, factor := range []float64{1.0, 1.25, 2} {
		t.Run(fmt.Sprint(factor), func(t *testing.T) {
			s, _ := newSched(t, loadCfg(factor, 1))
			bs := backendsN(8)
			ref, _ := newSched(t, affinity.Config{})
			// Hot keys: sessions whose plain HRW winner is b00.
			var hot []string
			for i := 0; len(hot) < 2000; i++ {
				id := fmt.Sprintf("hot%d", i)
				if b, _, _ := ref.SelectBackend(id, "", bs); b.ID() == "b00" {
					hot = append(hot, id)
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			var total int64
			for i, id := range hot {
				cost := int64(100 + rng.IntN(900))
				before := map[string]int64{}
				least := int64(-1)
				for _, b := range bs {
					before[b.ID()] = s.Load(b.ID()).Cost
					if least < 0 || before[b.ID()] < least {
						least = before[b.ID()]
					}
				}
				l, err := acquire(s, id, "", bs, cost)
				require.NoError(t, err)
				total += cost
				got := s.Load(l.Backend.ID()).Cost
				bound := factor * float64(total) / float64(len(bs))
				// Within the bound, or idle before, or — when no backend had room — the
				// least loaded.
				if float64(got) > bound+1e-9 && got != cost {
					require.Equal(t, least, before[l.Backend.ID()],
						"request %d: %s holds %d, bound %.1f, yet it was not the least loaded", i, l.Backend.ID(), got, bound)
					for _, b := range bs {
						require.Greater(t, float64(before[b.ID()]+cost), bound-1e-9, "request %d: %s had room", i, b.ID())
					}
				}
			}
			var maxLoad int64
			for _, b := range bs {
				maxLoad = max(maxLoad, s.Load(b.ID()).Cost)
			}
			assert.LessOrEqual(t, float64(maxLoad), factor*float64(total)/8+1000, "max %d", maxLoad)
		})
	}
}

// TestLoadDeterminism: two Schedulers (two gateway replicas) fed the same requests and
// the same load reports place and spill every session identically.
func TestLoadDeterminism(t *testing.T) {
	var rs [2]*affinity.Scheduler
	for k := range rs {
		rs[k], _ = newSched(t, loadCfg(1.2, 0.5))
	}
	bs := backendsN(7)
	rng := rand.New(rand.NewPCG(5, 6))
	type open struct{ l [2]*affinity.Lease }
	var live []open
	spills := 0
	for step := range 6000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(live))
			info := affinity.DoneInfo{PromptTokens: 2000, CachedPromptTokens: int64(rng.IntN(2000)), CacheReported: true}
			for k := range rs {
				live[j].l[k].Done(info)
			}
			live = append(live[:j], live[j+1:]...)
			continue
		}
		if rng.IntN(50) == 0 {
			rep := affinity.BackendLoad{Waiting: int64(rng.IntN(20)), Running: int64(rng.IntN(20))}
			id := bs[rng.IntN(len(bs))].ID()
			for k := range rs {
				require.NoError(t, rs[k].ReportLoad(id, rep))
			}
		}
		session := fmt.Sprintf("s%d", rng.IntN(400))
		cost := int64(1 + rng.IntN(8000))
		var o open
		for k := range rs {
			l, err := acquire(rs[k], session, "", bs, cost)
			require.NoError(t, err)
			o.l[k] = l
		}
		require.Equal(t, o.l[0].Backend.ID(), o.l[1].Backend.ID(), "step %d", step)
		require.Equal(t, o.l[0].Outcome, o.l[1].Outcome, "step %d", step)
		if o.l[0].Outcome == affinity.OutcomeSpill {
			spills++
		}
		live = append(live, o)
	}
	assert.Equal(t, rs[0].Stats(), rs[1].Stats())
	assert.Positive(t, spills, "the run exercised spills")
	t.Logf("spills: %d, stats %+v", spills, rs[0].Stats())
}

// TestAcquireIdleEqualsHRW: with load awareness on but no load, Acquire places every new
// session on SelectBackend's HRW winner — at 8 and at 200 candidates (the pooled-scratch
// path), with mixed weights and a duplicate ID.
func TestAcquireIdleEqualsHRW(t *testing.T) {
	for _, n := range []int{8, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			bs := make([]affinity.Backend, n)
			for i := range bs {
				bs[i] = affinity.MustBackend(fmt.Sprintf("b%03d", i), "", float64(1+i%3))
			}
			bs = append(bs, bs[n/2]) // a duplicate collapses to its first occurrence
			ref, _ := newSched(t, affinity.Config{})
			s, _ := newSched(t, loadCfg(1.1, 1))
			for i := range 500 {
				id := fmt.Sprintf("s%d", i)
				want, _, err := ref.SelectBackend(id, "", bs)
				require.NoError(t, err)
				l, err := acquire(s, id, "", bs, 100)
				require.NoError(t, err)
				require.Equal(t, want.ID(), l.Backend.ID(), id)
				l.Done(affinity.DoneInfo{})
			}
		})
	}
}

// TestLoadPlacementOrderIndependent: for a fixed load view, placement and spill do not
// depend on the order of the candidates (rule 8 holds with load awareness on).
func TestLoadPlacementOrderIndependent(t *testing.T) {
	bs := backendsN(9)
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 50 {
		var rs [2]*affinity.Scheduler
		for k := range rs {
			rs[k], _ = newSched(t, loadCfg(1.1, 0.5))
		}
		// The same load on both: one open lease of random cost per backend, some idle.
		for i, b := range bs {
			if rng.IntN(3) == 0 {
				continue
			}
			cost := int64(1 + rng.IntN(20000))
			for k := range rs {
				_, err := acquire(rs[k], fmt.Sprintf("bg%d", i), "", []affinity.Backend{b}, cost)
				require.NoError(t, err)
			}
		}
		for s := range 40 {
			id := fmt.Sprintf("r%d-s%d", round, s)
			perm := append([]affinity.Backend(nil), bs...)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			a, err := acquire(rs[0], id, "", bs, 3000)
			require.NoError(t, err)
			b, err := acquire(rs[1], id, "", perm, 3000)
			require.NoError(t, err)
			require.Equal(t, a.Backend.ID(), b.Backend.ID(), "round %d session %d", round, s)
			require.Equal(t, a.Outcome, b.Outcome)
			a.Done(affinity.DoneInfo{})
			b.Done(affinity.DoneInfo{})
		}
	}
}
