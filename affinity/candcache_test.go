package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// TestPlacementOverRememberedListsMatchesReference: the walk remembers the load records
// of the candidate lists it sees again (the same Backend values, so the same ID strings).
// Placements over such lists, and spills of hits over them, must still follow the plain
// rule when the lists change behind the cache: a candidate replaced in place, the same ID
// string with another weight, a duplicate ID, health changes, and a zero Backend.
func TestPlacementOverRememberedListsMatchesReference(t *testing.T) {
	const factor = 1.25
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 24 {
		s, _ := newSched(t, loadCfg(factor, 1))
		all := backendsN(2 + rng.IntN(20))
		spare := backendsN(len(all) + 3)[len(all):] // IDs not in all
		lists := [][]affinity.Backend{
			all,                               // the caller's own slice, mutated below
			slices.Clone(all[:len(all)/2+1]),  // a subset
			append(slices.Clone(all), all[0]), // with a duplicate ID
		}
		var open []*affinity.Lease
		for i := range rng.IntN(40) {
			if l, err := acquire(s, fmt.Sprintf("bg%d", i), "", all, int64(1+rng.IntN(3000))); err == nil {
				open = append(open, l)
			}
		}
		for i := range 300 {
			cands := lists[rng.IntN(len(lists))]
			j := rng.IntN(len(cands))
			switch rng.IntN(24) {
			case 0: // another backend in place: same slice, a different ID at j
				cands[j] = spare[rng.IntN(len(spare))]
			case 1: // the same ID string with another weight
				cands[j] = affinity.MustBackend(cands[j].ID(), cands[j].Addr(), float64(1+rng.IntN(3)))
			case 2:
				s.OnBackendDown(cands[j].ID())
			case 3:
				s.OnBackendDraining(cands[j].ID())
			case 4:
				s.OnBackendUp(cands[j].ID())
				s.Undrain(cands[j].ID())
			case 5: // a zero Backend: an error, nothing leased, the list still works after
				saved := cands[j]
				cands[j] = affinity.Backend{}
				_, err := acquire(s, fmt.Sprintf("zero-%d-%d", round, i), "", cands, 10)
				require.ErrorIs(t, err, affinity.ErrInvalidBackend)
				cands[j] = saved
			}
			session := fmt.Sprintf("r%d-s%d", round, i)
			units := int64(1 + rng.IntN(4000))
			eligible := false
			for _, c := range cands {
				eligible = eligible || s.Health().State(c.ID()) != health.Down
			}
			var want string
			if eligible {
				want = refPlace(t, s, session, cands, units, factor)
			}
			l, err := acquire(s, session, "", cands, units)
			if !eligible {
				require.ErrorIs(t, err, affinity.ErrNoEligibleBackend)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, want, l.Backend.ID(), "round %d session %d", round, i)
			require.Equal(t, affinity.OutcomeMiss, l.Outcome)
			if rng.IntN(3) == 0 {
				open = append(open, l) // loads keep changing
			} else {
				l.Done(affinity.DoneInfo{})
			}
		}
		for _, l := range open {
			l.Done(affinity.DoneInfo{})
		}
		for _, b := range append(slices.Clone(all), spare...) {
			require.Zero(t, s.Load(b.ID()).Requests, b.ID())
		}
	}
}

// TestWalkOverRememberedListAllocs: with every backend busy, a first turn over a candidate
// list seen before allocates only its stored key, and a hit whose backend is busy (its
// walk reads every candidate's load) allocates nothing — at 8 and 64 candidates.
func TestWalkOverRememberedListAllocs(t *testing.T) {
	for _, n := range []int{8, 64} {
		s, _ := newSched(t, loadCfg(1.25, 1))
		bs := backendsN(n)
		for i := range 4 * n { // every backend busy
			_, err := acquire(s, fmt.Sprintf("bg%d", i), "", bs, int64(500+i%5*200))
			require.NoError(t, err)
		}
		var l affinity.Lease                                   // the caller's, reused below
		require.NoError(t, s.Acquire("hot", "", bs, 1000, &l)) // the hit below, on a busy backend
		l.Done(affinity.DoneInfo{})
		ids := make([]string, 20000)
		for j := range ids {
			ids[j] = fmt.Sprintf("new%d", j)
		}
		for _, id := range ids[10000:] { // steady state: every shard has grown and seen every backend
			_, _, err := s.SelectBackend(id, "", bs)
			require.NoError(t, err)
		}
		i := 0
		miss := testing.AllocsPerRun(500, func() {
			i++
			err := s.Acquire(ids[i], "", bs, 100, &l)
			if err != nil || l.Outcome != affinity.OutcomeMiss {
				t.Fatal("not a miss", l.Outcome, err)
			}
			l.Done(affinity.DoneInfo{})
		})
		assert.LessOrEqual(t, miss, 1.0, "n=%d: only the stored key", n)
		hit := testing.AllocsPerRun(500, func() {
			err := s.Acquire("hot", "", bs, 1000, &l)
			if err != nil || l.Outcome != affinity.OutcomeHit {
				t.Fatal("not a hit", l.Outcome, err)
			}
			l.Done(affinity.DoneInfo{})
		})
		assert.Zero(t, hit, "n=%d", n)
	}
}
