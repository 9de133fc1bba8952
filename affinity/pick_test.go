package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

// A miss places a new session on hrw.Pick's winner over the candidates, whatever their
// number (the scheduler's own loops run up to 64 candidates branch-free and beyond that
// four at a time), order, weights and duplicates; a zero Backend anywhere is rejected.
func TestMissPlacementManyCandidates(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	variants := []string{"equal", "one other weight", "mixed weights", "duplicate of the winner", "duplicate first", "zero backend"}
	for _, n := range []int{1, 2, 8, 63, 64, 65, 66, 67, 100, 512, 513} {
		for _, variant := range variants {
			t.Run(fmt.Sprintf("n=%d/%s", n, variant), func(t *testing.T) {
				f := newFixture(t, affinity.Config{})
				for k := range 100 {
					session := fmt.Sprintf("s%d-%d", n, k)
					cands := backends(t, n)
					rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
					switch variant {
					case "one other weight":
						i := rng.IntN(n)
						cands[i] = affinity.MustBackend(cands[i].ID(), cands[i].Addr(), 2)
					case "mixed weights":
						for i := range cands {
							cands[i] = affinity.MustBackend(cands[i].ID(), cands[i].Addr(), 0.5+3.5*rng.Float64())
						}
					case "duplicate of the winner": // a later copy ties with it exactly
						w := hrwIndex(session, cands)
						p := w + 1 + rng.IntN(n-w)
						cands = append(cands[:p], append([]affinity.Backend{cands[w]}, cands[p:]...)...)
					case "duplicate first": // an earlier copy of a random candidate
						i := rng.IntN(n)
						cands = append([]affinity.Backend{cands[i]}, cands...)
					case "zero backend":
						i := rng.IntN(n + 1)
						cands = append(cands[:i], append([]affinity.Backend{{}}, cands[i:]...)...)
						_, _, err := f.s.SelectBackend(session, "", cands)
						require.ErrorIs(t, err, affinity.ErrInvalidBackend)
						_, ok := f.s.Lookup(session, "")
						require.False(t, ok)
						continue
					}
					id, hit := f.sel(t, session, "", cands)
					require.False(t, hit)
					require.Equal(t, hrwWinner(session, cands), id, session)
				}
			})
		}
	}
}

// The loops compare the top 31 bits of each candidate's mix before its last xorshift and
// finish it only when those reach the best's. Two backends whose mixes share their top 31
// bits (found by a birthday search over IDs for a fixed session), above every other
// candidate's, in either order at random positions: the miss must still go to hrw.Pick's
// winner (the larger full mix).
func TestMissPlacementTopBitTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, session := range []string{"tie-a", "tie-b"} {
		kh := hrw.KeyHash(session)
		top := func(id string) uint64 { return hrw.Mix(kh, hrw.NodeHash(id)) >> 33 }
		a, b := topBitTie(t, top)
		require.NotEqual(t, hrw.Mix(kh, hrw.NodeHash(a))>>11, hrw.Mix(kh, hrw.NodeHash(b))>>11)
		var fillers []affinity.Backend
		for i := 0; len(fillers) < 511; i++ {
			if id := "f" + strconv.Itoa(i); top(id) < top(a) {
				fillers = append(fillers, affinity.MustBackend(id, "", 1))
			}
		}
		for _, n := range []int{2, 3, 8, 64, 65, 66, 100, 512, 513} {
			t.Run(fmt.Sprintf("%s/n=%d", session, n), func(t *testing.T) {
				for k := range 20 {
					f := newFixture(t, affinity.Config{})
					cands := append([]affinity.Backend(nil), fillers[:n-2]...)
					pa, pb := rng.IntN(n-1), rng.IntN(n)
					cands = append(cands[:pa], append([]affinity.Backend{affinity.MustBackend(a, "", 1)}, cands[pa:]...)...)
					cands = append(cands[:pb], append([]affinity.Backend{affinity.MustBackend(b, "", 1)}, cands[pb:]...)...)
					id, hit := f.sel(t, session, "", cands)
					require.False(t, hit)
					require.Equal(t, hrwWinner(session, cands), id, "round %d", k)
				}
			})
		}
	}
}

// topBitTie returns two backend IDs with equal top(id), searching IDs "t0", "t1", ...
// (a birthday search: a pair in about 2^16 IDs for a 31-bit top) and keeping the pair
// with the largest value among the first few found.
func topBitTie(t *testing.T, top func(string) uint64) (string, string) {
	t.Helper()
	seen := make(map[uint64]string)
	var a, b string
	var best uint64
	for i, found := 0, 0; found < 8; i++ {
		require.Less(t, i, 1<<22, "no tie found")
		id := "t" + strconv.Itoa(i)
		v := top(id)
		if prev, ok := seen[v]; ok {
			found++
			if a == "" || v > best {
				a, b, best = prev, id, v
			}
			continue
		}
		seen[v] = id
	}
	return a, b
}

// hrwIndex is hrwWinner's index in cands.
func hrwIndex(session string, cands []affinity.Backend) int {
	nodes := make([]hrw.Node, len(cands))
	for i, b := range cands {
		nodes[i] = b.Node()
	}
	return hrw.Pick(hrw.KeyHash(session), nodes)
}
