package affinity_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
)

// refPlace is the bounded-load placement rule written out plainly: sort the eligible
// candidates (Healthy; Draining only when none is Healthy; first copy of an ID) by the
// session's HRW ranking, take the first whose load, this request counted, is within
// factor x the mean (or that is idle), else the least loaded (ties: ranking). When the
// eligible candidates' weights differ (rule 15), candidate i's bound is its share,
// factor x (total + units) x w_i / W, and the fallback the least load / w_i.
func refPlace(t *testing.T, s *affinity.Scheduler, session string, cands []affinity.Backend, units int64, factor float64) string {
	t.Helper()
	kh := hrw.KeyHash(session)
	var elig []int
	for _, want := range []health.State{health.Healthy, health.Draining} {
		seen := map[string]bool{}
		for i, c := range cands {
			if !seen[c.ID()] && s.Health().State(c.ID()) == want {
				elig = append(elig, i)
			}
			seen[c.ID()] = true
		}
		if len(elig) > 0 {
			break
		}
	}
	require.NotEmpty(t, elig)
	load := func(i int) int64 { return s.Load(cands[i].ID()).Cost }
	varied := false
	for _, c := range cands {
		varied = varied || c.Weight() != cands[0].Weight()
	}
	slices.SortStableFunc(elig, func(a, b int) int {
		if varied {
			if c := cmp.Compare(hrw.Score(kh, cands[b].Node()), hrw.Score(kh, cands[a].Node())); c != 0 {
				return c
			}
		}
		ma, mb := hrw.Mix(kh, cands[a].Node().Hash())>>11, hrw.Mix(kh, cands[b].Node().Hash())>>11
		if c := cmp.Compare(mb, ma); c != 0 {
			return c
		}
		return cmp.Compare(cands[a].ID(), cands[b].ID())
	})
	var total int64
	var wsum float64
	weighted := false
	for _, i := range elig {
		total += load(i)
		wsum += cands[i].Weight()
		weighted = weighted || cands[i].Weight() != cands[elig[0]].Weight()
	}
	limit := func(int) float64 { return factor * float64(total+units) / float64(len(elig)) }
	rel := func(i int) float64 { return float64(load(i)) } // what the fallback minimises
	if weighted {
		limit = func(i int) float64 { return factor * float64(total+units) * cands[i].Weight() / wsum }
		rel = func(i int) float64 { return float64(load(i)) / cands[i].Weight() }
	}
	least := elig[0]
	for _, i := range elig {
		if l := load(i); l == 0 || float64(l+units) <= limit(i) {
			return cands[i].ID()
		}
		if rel(i) < rel(least) {
			least = i
		}
	}
	return cands[least].ID()
}

// TestPlacementMatchesReference: first turns placed by Acquire with load awareness on
// land where the plain rule says, over random loads, weights (equal or mixed), health
// states, candidate subsets, orders and duplicate IDs.
func TestPlacementMatchesReference(t *testing.T) {
	const factor = 1.25
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 40 {
		s, _ := newSched(t, loadCfg(factor, 1))
		all := backendsN(3 + rng.IntN(14))
		if round%3 == 1 { // mixed weights
			for i := range all {
				all[i] = affinity.MustBackend(all[i].ID(), all[i].Addr(), float64(1+rng.IntN(4)))
			}
		}
		for _, b := range all {
			switch rng.IntN(8) {
			case 0:
				s.OnBackendDown(b.ID())
			case 1:
				s.OnBackendDraining(b.ID())
			}
		}
		// Background load: open leases of varied cost, placed by the rule itself.
		for i := range rng.IntN(60) {
			if _, err := acquire(s, fmt.Sprintf("bg%d", i), "", all, int64(1+rng.IntN(3000))); err != nil {
				require.ErrorIs(t, err, affinity.ErrNoEligibleBackend)
			}
		}
		for i := range 200 {
			cands := slices.Clone(all)
			rng.Shuffle(len(cands), func(a, b int) { cands[a], cands[b] = cands[b], cands[a] })
			cands = cands[:1+rng.IntN(len(cands))]
			if rng.IntN(5) == 0 { // a duplicate ID
				cands = append(cands, cands[rng.IntN(len(cands))])
			}
			session := fmt.Sprintf("r%d-s%d", round, i)
			units := int64(1 + rng.IntN(4000))
			l, err := acquire(s, session, "", cands, units)
			if err != nil {
				require.ErrorIs(t, err, affinity.ErrNoEligibleBackend)
				continue
			}
			l.Done(affinity.DoneInfo{}) // measure against the load before this request
			want := refPlace(t, s, session, cands, units, factor)
			require.Equal(t, want, l.Backend.ID(), "round %d session %d", round, i)
			require.Equal(t, affinity.OutcomeMiss, l.Outcome)
		}
	}
}
