package hrw_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// The selection loops compare only the top 31 bits of each node's mixed value before its
// last xorshift (which leaves those bits alone) and finish the mix only when they tie.
// This builds exactly such ties at the top (two nodes whose top 31 bits are the largest
// possible, with their m values in either order or equal, so the IDs decide) at random
// positions among random nodes, for every loop size class and with equal and mixed
// weights, and checks every selection against the naive reference.
func TestTopBitTiesEqualReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 31))
	for _, n := range []int{2, 3, 8, 64, 65, 100, 513} {
		for _, variant := range []string{"m either order", "equal m", "mixed weights"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, variant), func(t *testing.T) {
				for k := range 300 {
					kh := rng.Uint64()
					w := func() float64 {
						if variant == "mixed weights" {
							return 0.5 + 3.5*rng.Float64()
						}
						return 1
					}
					nodes := make([]hrw.Node, n)
					for i := range nodes {
						nodes[i] = hrw.NodeWithMid(fmt.Sprintf("b%d-%d", i, rng.IntN(1000)), kh, rng.Uint64()>>1, w())
					}
					top := uint64(1<<31-1) << 33
					za := top | rng.Uint64()&(1<<33-1)
					zb := top | rng.Uint64()&(1<<33-1)
					if variant == "equal m" {
						zb = za ^ (1 + rng.Uint64()%2047) // differs below bit 11 only: same m
					}
					a, b := rng.IntN(n), rng.IntN(n)
					for b == a {
						b = rng.IntN(n)
					}
					nodes[a] = hrw.NodeWithMid(fmt.Sprintf("t%d", rng.IntN(10)), kh, za, w())
					nodes[b] = hrw.NodeWithMid(fmt.Sprintf("t%d", 10+rng.IntN(10)), kh, zb, w())
					require.Equal(t, za, hrw.MidOf(kh, nodes[a]))
					if variant == "equal m" {
						require.Equal(t, hrw.Mix(kh, nodes[a].Hash())>>11, hrw.Mix(kh, nodes[b].Hash())>>11)
					}
					want := refRank(kh, nodes, nil)
					require.Equal(t, want[0], hrw.Pick(kh, nodes), "Pick key %d", k)
					require.Equal(t, want[0], hrw.PickFunc(kh, nodes, func(int) bool { return true }), "PickFunc key %d", k)
					var best hrw.Best
					require.Equal(t, want[0], bestPick(&best, kh, nodes), "Best key %d", k)
					require.Equal(t, want[:min(3, len(want))], hrw.TopK(nil, kh, nodes, 3), "TopK key %d", k)
					r, err := hrw.New(nodes)
					require.NoError(t, err)
					rn, ok := r.Pick(kh)
					require.True(t, ok)
					require.Equal(t, nodes[want[0]], rn, "Ranker.Pick key %d", k)
					require.Equal(t, idsOf(nodes, want[:min(3, len(want))]), nodeIDs(r.TopK(nil, kh, 3)), "Ranker.TopK key %d", k)
				}
			})
		}
	}
}

// A Ranker over more than 128 live nodes with mixed weights first passes over the nodes
// that cannot win even with the set's largest weight (skipMax). With a few weight classes
// the winner is often a heaviest node within a few percent of the leader it overtakes,
// exactly where a wrong pass-over bound would show; compare with the naive reference.
func TestRankerManyNodesFewWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for _, n := range []int{129, 200, 513, 1024} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			nodes := make([]hrw.Node, n)
			for i := range nodes {
				nodes[i] = mustNode(t, fmt.Sprintf("backend-%d", i), float64(1+rng.IntN(3)))
			}
			r, err := hrw.New(nodes)
			require.NoError(t, err)
			for k := range 1000 {
				kh := hrw.KeyHash(fmt.Sprintf("session-%d", k))
				want := refPick(kh, nodes)
				got, ok := r.Pick(kh)
				require.True(t, ok)
				require.Equal(t, nodes[want], got, "Ranker.Pick key %d", k)
				require.Equal(t, want, hrw.Pick(kh, nodes), "Pick key %d", k)
			}
		})
	}
}
