package affinity

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

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
	for _, c := range tieCases {
		n, m := c.n, c.floor
		t.Run(fmt.Sprintf("n=%d floor=%d", n, m), func(t *testing.T) {
			for trial := range 300 {
				s, cands, es, loads, total, kh, tops := tieFixture(t, rng, n, trial, 3, 2000, 4, m)
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
	for _, c := range tieCases {
		n, m := c.n, c.floor
		t.Run(fmt.Sprintf("n=%d floor=%d", n, m), func(t *testing.T) {
			var stayed, spilled, none, declined int
			for trial := range 400 {
				s, cands, es, loads, total, kh, tops := tieFixture(t, rng, n, trial, 4, 3000, 5, m)
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

// TestFastMatchesWalkFullFloor: wherever placeFast and stayFast answer, walkFull answers
// the same (placement, bound load and whether it is over the bound, spill target and its
// load), over random leases (1 to 4 per backend, 1 to 3,000 tokens each, so that
// min_request_cost's floor binds on some backends and not on others), floors 0, 512 and
// 4096, with and without the drain model (a random part of the work drained), some
// backends Draining. Real rank keys: the ties the fast paths decline are left to the
// top-tie tests.
func TestFastMatchesWalkFullFloor(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 23))
	const units = 500
	for _, floor := range []int64{0, 512, 4096} {
		for _, drain := range []float64{0, 16000} {
			t.Run(fmt.Sprintf("floor=%d drain=%v", floor, drain), func(t *testing.T) {
				var placed, stayed, spilled int
				for trial := range 300 {
					now := time.Unix(1700000000, 0)
					clk := ClockFunc(func() time.Time { return now })
					s, err := New(Config{Load: LoadConfig{BalanceFactor: 1.25, MinRequestCost: floor, DrainTokensPerSecond: drain}}, WithClock(clk))
					require.NoError(t, err)
					n := 2 + rng.IntN(10)
					cands, es := make([]Backend, n), make([]candEntry, n)
					for i := range cands {
						cands[i] = MustBackend(fmt.Sprintf("f%d-b%d", trial, i), "", 1)
						es[i] = candEntry{id: cands[i].node.ID(), bl: s.ld.loads.get(cands[i].node.ID(), cands[i].node.Hash())}
						for range rng.IntN(5) {
							require.NoError(t, s.LeaseBackend(cands[i], int64(1+rng.IntN(3000)), new(Lease)))
						}
						if rng.IntN(8) == 0 {
							s.OnBackendDraining(cands[i].node.ID())
						}
					}
					now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
					kh := rng.Uint64()
					if w, load, ok := s.placeFast(kh, cands, es, units); ok {
						pl, err := s.walkFull(kh, cands, units, -1)
						require.NoError(t, err)
						require.Equal(t, pl.w, w, "trial %d: placement", trial)
						require.Equal(t, pl.load, load, "trial %d: its load", trial)
						placed++
					}
					bound := rng.IntN(n)
					sp, ok := s.stayFast(kh, cands, es, units, bound)
					if !ok {
						continue
					}
					pl, err := s.walkFull(kh, cands, units, bound)
					require.NoError(t, err)
					require.Equal(t, pl.boundLoad, sp.boundLoad, "trial %d: bound load", trial)
					require.Equal(t, pl.boundOver, sp.over, "trial %d: over the bound", trial)
					if !sp.over {
						stayed++
						continue
					}
					require.Equal(t, pl.w, sp.w, "trial %d: spill target", trial)
					if sp.w >= 0 {
						require.Equal(t, pl.load, sp.load, "trial %d: target load", trial)
						spilled++
					}
				}
				t.Logf("placed %d, stayed %d, spill target %d", placed, stayed, spilled)
				require.Positive(t, placed)
				require.Positive(t, stayed)
				require.Positive(t, spilled)
			})
		}
	}
}

// tieCases are the sizes of the top-tie tests, each without and with min_request_cost's
// floor (rule 14e: placeFast and stayFast read it through sumView and view).
var tieCases = []struct {
	n     int
	floor int64
}{{2, 0}, {3, 0}, {8, 0}, {64, 0}, {3, 1024}, {8, 1024}, {64, 1024}}

// tieFixture builds one trial of the top-tie tests: a Scheduler with load awareness on
// (balance_factor 1.25, min_request_cost floor), n candidates with their remembered
// entries, loads leased on all but one in idleOneIn (each 1 to maxLoad tokens; with a
// floor, in 1 to 3 leases, so that the floor binds on some backends and not on others;
// loads are the load views, total their sum), a key hash kh and each candidate's top 31
// bits of its mid value (tops), one in shareOneIn copying an earlier candidate's so that
// ties occur; the premixed hashes are set to give those bits.
func tieFixture(t *testing.T, rng *rand.Rand, n, trial, idleOneIn, maxLoad, shareOneIn int, floor int64) (s *Scheduler, cands []Backend, es []candEntry, loads []int64, total int64, kh uint64, tops []uint64) {
	t.Helper()
	s, err := New(Config{Load: LoadConfig{BalanceFactor: 1.25, SpillCostWeight: SpillWeight(1), MinRequestCost: floor}})
	require.NoError(t, err)
	cands, es, loads = make([]Backend, n), make([]candEntry, n), make([]int64, n)
	for i := range cands {
		cands[i] = MustBackend(fmt.Sprintf("t%d-b%d", trial, i), "", 1)
		bl := s.ld.loads.get(cands[i].node.ID(), cands[i].node.Hash())
		es[i] = candEntry{id: cands[i].node.ID(), bl: bl}
		if rng.IntN(idleOneIn) > 0 { // the others idle: always under the bound
			loads[i] = int64(1 + rng.IntN(maxLoad))
			bl.add(loads[i])
			if floor > 0 {
				for range rng.IntN(3) { // more leases: 1 + rng.IntN(maxLoad) / 4 tokens each
					bl.add(int64(1 + rng.IntN(maxLoad/4)))
				}
				loads[i] = bl.view(&s.ld.p, 0)
			}
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
