package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// weightedBackends returns backends w0, w1, ... with the given weights.
func weightedBackends(weights ...float64) []affinity.Backend {
	bs := make([]affinity.Backend, len(weights))
	for i, w := range weights {
		bs[i] = affinity.MustBackend(fmt.Sprintf("w%d", i), fmt.Sprintf("http://10.0.1.%d", i), w)
	}
	return bs
}

// TestWeightedBoundSharesFollowWeights: under sustained load (new sessions arrive while
// about 40 leases stay open, each released at random), the bound of rule 15 is each
// backend's weighted share, so over many Acquires the new sessions of backends weighted
// 1, 2, 3, 1 land in proportion to the weights (within 15 %), as they do with no load.
// Under the unweighted bound every backend was held to the same load and the shares
// flattened (about 4000/5700/6200/4100 of 20,000 where the weights ask 2857/5714/8571/2857).
func TestWeightedBoundSharesFollowWeights(t *testing.T) {
	weights := []float64{1, 2, 3, 1}
	bs := weightedBackends(weights...)
	for _, factor := range []float64{1.1, 1.25, 2} {
		t.Run(fmt.Sprint(factor), func(t *testing.T) {
			s, _ := newSched(t, loadCfg(factor, 1))
			rng := rand.New(rand.NewPCG(11, 12))
			const n, held = 20000, 40
			count := map[string]int{}
			var open []*affinity.Lease
			for i := range n {
				l, err := acquire(s, fmt.Sprintf("s%d", i), "", bs, int64(500+rng.IntN(1000)))
				require.NoError(t, err)
				require.Equal(t, affinity.OutcomeMiss, l.Outcome)
				count[l.Backend.ID()]++
				open = append(open, l)
				if len(open) > held {
					k := rng.IntN(len(open))
					open[k].Done(affinity.DoneInfo{})
					open[k] = open[len(open)-1]
					open = open[:len(open)-1]
				}
			}
			for _, l := range open {
				l.Done(affinity.DoneInfo{})
			}
			var wsum float64
			for _, w := range weights {
				wsum += w
			}
			for i, b := range bs {
				want := float64(n) * weights[i] / wsum
				assert.InEpsilon(t, want, float64(count[b.ID()]), 0.15,
					"%s (weight %v): %d placements, proportional share %.0f", b.ID(), weights[i], count[b.ID()], want)
			}
			t.Logf("factor %v: %v", factor, count)
		})
	}
}

// unweightedPlace is the bound of equal weights written out on its own: the first backend
// of the ranking (the candidates ranked by SelectBackend on a Scheduler without load, one
// at a time) whose load, this request counted, is within factor x (total + units) / n or
// that is idle; else the least loaded (ties: ranking). The candidates are all eligible and
// distinct.
func unweightedPlace(t *testing.T, s *affinity.Scheduler, session string, cands []affinity.Backend, units int64, factor float64) string {
	t.Helper()
	plain, _ := newSched(t, affinity.Config{})
	var ranked []affinity.Backend
	for rest := cands; len(rest) > 0; {
		w, err := rankFirst(plain, session, rest)
		require.NoError(t, err)
		ranked = append(ranked, rest[w])
		rest = append(append([]affinity.Backend(nil), rest[:w]...), rest[w+1:]...)
	}
	var total int64
	for _, c := range cands {
		total += s.Load(c.ID()).Cost
	}
	limit := factor * float64(total+units) / float64(len(cands))
	least := ranked[0]
	for _, c := range ranked {
		if l := s.Load(c.ID()).Cost; l == 0 || float64(l+units) <= limit {
			return c.ID()
		}
		if s.Load(c.ID()).Cost < s.Load(least.ID()).Cost {
			least = c
		}
	}
	return least.ID()
}

// rankFirst is the index in cands of session's HRW winner over cands (SelectBackend on a
// Scheduler without load, the binding forgotten after).
func rankFirst(s *affinity.Scheduler, session string, cands []affinity.Backend) (int, error) {
	b, _, err := s.SelectBackend(session, "", cands)
	if err != nil {
		return -1, err
	}
	s.Forget(session, "")
	for i, c := range cands {
		if c.ID() == b.ID() {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%s not a candidate", b.ID())
}

// TestEqualWeightsPlaceByUnweightedBound: when the eligible candidates' weights are equal
// — 1 or any other value, beside a Down candidate of another weight — placements follow
// the unweighted bound of every earlier release: factor x (total + units) / n.
func TestEqualWeightsPlaceByUnweightedBound(t *testing.T) {
	const factor = 1.25
	rng := rand.New(rand.NewPCG(13, 14))
	for _, w := range []float64{1, 2.5, 1e-6} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			ws := make([]float64, 6)
			for i := range ws {
				ws[i] = w
			}
			bs := weightedBackends(ws...)
			s, _ := newSched(t, loadCfg(factor, 1))
			down := affinity.MustBackend("down", "http://10.0.2.1", 3)
			s.OnBackendDown(down.ID())
			all := append([]affinity.Backend{down}, bs...) // eligible: bs
			for i := range 30 {
				_, err := acquire(s, fmt.Sprintf("bg%d", i), "", bs, int64(1+rng.IntN(3000)))
				require.NoError(t, err)
			}
			for i := range 300 {
				session := fmt.Sprintf("s%d", i)
				units := int64(1 + rng.IntN(4000))
				want := unweightedPlace(t, s, session, bs, units, factor)
				cands := bs
				if i%2 == 1 {
					cands = all
				}
				l, err := acquire(s, session, "", cands, units)
				require.NoError(t, err)
				require.Equal(t, want, l.Backend.ID(), "session %d", i)
				if rng.IntN(2) == 0 {
					l.Done(affinity.DoneInfo{})
				}
			}
		})
	}
}

// TestWeightedBoundSpill: a hit's backend is over the bound when it is over its own
// weighted share, and a spill's target must be under its own: a weight-3 backend keeps a
// session at a load the unweighted mean would call overloaded, and a weight-1 backend
// sends it on at a load the mean would still allow. The spill guard compares raw waits
// (work queued) as before. The walk remembers the candidate list from the session's first
// turn, so the hit asks the fast path first (stayFast), which must decline when weights
// differ: it knows only the unweighted bound.
func TestWeightedBoundSpill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wA, wB float64 // weights of the bound backend A and of B, ranked after it
		loadA  int64   // load piled on A
		loadB  int64
		prompt int64            // the binding's last reported prompt (all cached): its reprefill
		want   affinity.Outcome // the unweighted mean decided the other outcome in the first three
	}{
		// S = 2500+500+1000 = 4000: mean bound 2500 (A 3500 over, B 1500 under); A's
		// share 3750 (under): stays.
		{"heavy backend within its share", 3, 1, 2500, 500, 1000, affinity.OutcomeHit},
		// S = 4900: mean bound 3062.5 (A 3000 under); A's share 1225 (over), B's 4900
		// (2900 under), wait(A) - wait(B) = 100 > 1 x 64: spills.
		{"light backend over its share", 1, 4, 2000, 1900, 64, affinity.OutcomeSpill},
		// S = 3500: mean bound 2187.5 (A 2300, B 2200: both over); A's share 1093.75
		// (over), B's 3281.25 (under), wait(A) - wait(B) = 100 > 64: spills to B.
		{"target under its own share", 1, 3, 1300, 1200, 64, affinity.OutcomeSpill},
		// The guard still weighs raw waits: B under its share but with more queued work.
		{"guard on raw waits", 1, 4, 2000, 2100, 64, affinity.OutcomeHit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSched(t, loadCfg(1.25, 1))
			bs := weightedBackends(tc.wA, tc.wB)
			a, b := bs[0], bs[1]
			// A session that ranks A before B, bound to A.
			plain, _ := newSched(t, affinity.Config{})
			session := ""
			for i := 0; session == ""; i++ {
				if w, err := rankFirst(plain, fmt.Sprint("sess", i), bs); err == nil && w == 0 {
					session = fmt.Sprint("sess", i)
				}
			}
			l, err := acquire(s, session, "", bs, 1000)
			require.NoError(t, err)
			require.Equal(t, a.ID(), l.Backend.ID())
			l.Done(affinity.DoneInfo{PromptTokens: tc.prompt, CachedPromptTokens: tc.prompt, CacheReported: true})
			for _, p := range []struct {
				b    affinity.Backend
				load int64
			}{{a, tc.loadA}, {b, tc.loadB}} {
				_, err := acquire(s, "pile-"+p.b.ID(), "", []affinity.Backend{p.b}, p.load)
				require.NoError(t, err)
			}
			l, err = acquire(s, session, "", bs, 1000)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l.Outcome)
			if tc.want == affinity.OutcomeSpill {
				assert.Equal(t, b.ID(), l.Backend.ID())
			}
		})
	}
}

// TestWeightedBoundParentGuard: the parent hint's guard asks the same bound (rule 21 via
// the walk): a child follows its parent to a weight-3 backend within its weighted share
// though over the unweighted mean, and not to a weight-1 backend over its share though
// under the mean (the unweighted bound decided the opposite in both).
func TestWeightedBoundParentGuard(t *testing.T) {
	for _, tc := range []struct {
		name         string
		wA, wB       float64 // the parent's backend A and the other, B
		loadA, loadB int64
		want         affinity.Placement
	}{
		// S = 2500+500+1000: A's share 3750 (3500 under; the mean 2500 is not).
		{"heavy parent backend within its share", 3, 1, 2500, 500, affinity.PlacedParent},
		// S = 4900: A's share 1225 (3000 over; the mean 3062.5 is not).
		{"light parent backend over its share", 1, 4, 2000, 1900, affinity.PlacedHRW},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSched(t, loadCfg(1.25, 1))
			bs := weightedBackends(tc.wA, tc.wB)
			parentOn(t, s, bs[0].ID(), bs, 128, 128) // rp = 128: the waits exceed 1 x rp
			holdLoad(t, s, bs, map[int]int64{0: tc.loadA, 1: tc.loadB})
			_, p, err := acquireWithParent(s, "child", "parent", "", bs, 1000)
			require.NoError(t, err)
			assert.Equal(t, tc.want, p)
		})
	}
}
