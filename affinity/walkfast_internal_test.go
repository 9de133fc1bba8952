package affinity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlaceFastTopTies: placeFast ranks by the top 31 bits of the mid value. It must
// return the best-ranked candidate under the bound when that is unique — whether or not
// the overall winner (over the bound, or tied with another over it) is that candidate —
// and decline (walkFull then decides by the full order) whenever two candidates under
// the bound share the best top bits. No search over IDs reaches such ties, so this sets
// the candidates' premixed hashes directly (mid inverted), the only value the loops read
// besides the weight and the load. White-box for that reason.
func TestPlaceFastTopTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	const factor, units = 1.25, 100
	for _, n := range []int{2, 3, 8, 64} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			for trial := range 300 {
				s, cands, es, loads, total, kh, tops := tieFixture(t, rng, n, trial, 3, 2000, 4)
				limit := factor * float64(total+units) / float64(n)
				best, tie := -1, false
				for i, l := range loads {
					if l != 0 && float64(l+units) > limit {
						continue
					}
					switch {
					case best < 0 || tops[i] > tops[best]:
						best, tie = i, false
					case tops[i] == tops[best]:
						tie = true
					}
				}
				w, load, ok := s.placeFast(kh, cands, es, units)
				if best < 0 || tie {
					require.False(t, ok, "trial %d: best %d tie %v, got %d", trial, best, tie, w)
					continue
				}
				require.True(t, ok, "trial %d", trial)
				require.Equal(t, best, w, "trial %d", trial)
				require.Equal(t, loads[best], load)
			}
		})
	}
}

// TestStayFastSpillTopTies: over the bound, stayFast returns the spill target — the
// best-ranked candidate under the bound among those ranked after the hit's backend —
// ranking by the top 31 bits of the mid value, and declines whenever the top bits cannot
// settle the order: another candidate shares the hit's top bits, or two targets share the
// best. Under the bound it stays. Premixed hashes set directly, as in
// TestPlaceFastTopTies.
func TestStayFastSpillTopTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	const factor, units = 1.25, 100
	for _, n := range []int{2, 3, 8, 64} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			var stayed, spilled, none, declined int
			for trial := range 400 {
				s, cands, es, loads, total, kh, tops := tieFixture(t, rng, n, trial, 4, 3000, 5)
				bound := rng.IntN(n)
				limit := factor * float64(total+units) / float64(n)
				under := func(i int) bool { return loads[i] == 0 || float64(loads[i]+units) <= limit }
				sp, ok := s.stayFast(kh, cands, es, units, bound)
				if under(bound) {
					require.True(t, ok, "trial %d", trial)
					require.False(t, sp.over)
					require.Equal(t, loads[bound], sp.boundLoad)
					stayed++
					continue
				}
				best, tie, undecided := -1, false, false
				for i := range cands {
					if i == bound {
						continue
					}
					if tops[i] == tops[bound] {
						undecided = true
					}
					if tops[i] > tops[bound] || !under(i) {
						continue
					}
					switch {
					case best < 0 || tops[i] > tops[best]:
						best, tie = i, false
					case tops[i] == tops[best]:
						tie = true
					}
				}
				if undecided || (best >= 0 && tie) {
					require.False(t, ok, "trial %d", trial)
					declined++
					continue
				}
				require.True(t, ok, "trial %d", trial)
				require.True(t, sp.over)
				require.Equal(t, loads[bound], sp.boundLoad)
				require.Equal(t, best, sp.w, "trial %d", trial)
				if best < 0 {
					none++
					continue
				}
				require.Equal(t, loads[best], sp.load)
				spilled++
			}
			t.Logf("stayed %d, spill target %d, none %d, declined %d", stayed, spilled, none, declined)
			require.Positive(t, spilled)
			require.Positive(t, declined)
		})
	}
}

// tieFixture builds one trial of the top-tie tests: a Scheduler with load awareness on
// (balance_factor 1.25), n candidates with their remembered entries, loads leased on all
// but one in idleOneIn (each 1 to maxLoad tokens; total is their sum), a key hash kh and
// each candidate's top 31 bits of its mid value (tops), one in shareOneIn copying an
// earlier candidate's so that ties occur; the premixed hashes are set to give those bits.
func tieFixture(t *testing.T, rng *rand.Rand, n, trial, idleOneIn, maxLoad, shareOneIn int) (s *Scheduler, cands []Backend, es []candEntry, loads []int64, total int64, kh uint64, tops []uint64) {
	t.Helper()
	s, err := New(Config{Load: LoadConfig{BalanceFactor: 1.25, SpillCostWeight: SpillWeight(1)}})
	require.NoError(t, err)
	cands, es, loads = make([]Backend, n), make([]candEntry, n), make([]int64, n)
	for i := range cands {
		cands[i] = MustBackend(fmt.Sprintf("t%d-b%d", trial, i), "", 1)
		bl := s.ld.loads.get(cands[i].node.ID(), cands[i].node.Hash())
		es[i] = candEntry{id: cands[i].node.ID(), bl: bl}
		if rng.IntN(idleOneIn) > 0 { // the others idle: always under the bound
			loads[i] = int64(1 + rng.IntN(maxLoad))
			bl.add(loads[i])
		}
		total += loads[i]
	}
	kh = rng.Uint64()
	kp := premix(kh)
	tops = make([]uint64, n)
	for i := range cands {
		tops[i] = rng.Uint64() >> 33
		if i > 0 && rng.IntN(shareOneIn) == 0 { // share an earlier candidate's top bits
			tops[i] = tops[rng.IntN(i)]
		}
		cands[i].pre = kp ^ unmid(tops[i]<<33|rng.Uint64()&low33)
	}
	return s, cands, es, loads, total, kh, tops
}
