package hrw_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// A Ranker over more than 64 nodes with a few distinct weights picks by weight class:
// the equal-weight winner of each class, then the best of those; up to 64 nodes the
// keyed selection (weighted.go) runs, as it does for Pick. This compares it (and Pick) with the naive
// reference for 1 to 6 distinct weights, small and large classes, weight-0 nodes, and
// built hard cases: two nodes of one class tied on the top 31 bits or on m (the IDs
// decide), two class winners whose scores are within a few ulps of each other (the
// ln-free bounds cannot separate them), and equal m in two classes.
func TestFewWeightsEqualReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	palette := []float64{1, 2, 3, 4, 0.5, 8, 1.5, 100}
	for _, n := range []int{8, 16, 40, 64, 100, 200, 513} {
		for k := 1; k <= 6; k++ {
			for _, variant := range []string{"random", "top-31 tie", "equal m", "near-tie classes", "equal m across classes"} {
				t.Run(fmt.Sprintf("n=%d/k=%d/%s", n, k, variant), func(t *testing.T) {
					ws := make([]float64, k)
					perm := rng.Perm(len(palette))
					for j := range ws {
						ws[j] = palette[perm[j]]
					}
					for trial := range 60 {
						kh := rng.Uint64()
						nodes := make([]hrw.Node, n)
						for i := range nodes {
							w := ws[i%k] // every weight used
							if i >= k && rng.IntN(20) == 0 {
								w = 0
							}
							nodes[i] = hrw.NodeWithMid(fmt.Sprintf("b%d-%d", i, rng.IntN(1000)), kh, rng.Uint64()>>1, w)
						}
						a, b := rng.IntN(n), rng.IntN(n)
						for b == a {
							b = rng.IntN(n)
						}
						wa, wb := ws[rng.IntN(k)], ws[rng.IntN(k)]
						top := uint64(1<<31-1) << 33
						switch variant {
						case "top-31 tie":
							nodes[a] = hrw.NodeWithMid(fmt.Sprintf("t%d", rng.IntN(10)), kh, top|rng.Uint64()&(1<<33-1), wa)
							nodes[b] = hrw.NodeWithMid(fmt.Sprintf("t%d", 10+rng.IntN(10)), kh, top|rng.Uint64()&(1<<33-1), wa)
						case "equal m":
							m := 1<<53 - 1 - rng.Uint64N(1<<20)
							nodes[a] = hrw.NodeWithM(fmt.Sprintf("t%d", rng.IntN(10)), kh, m, rng.Uint64(), wa)
							nodes[b] = hrw.NodeWithM(fmt.Sprintf("t%d", 10+rng.IntN(10)), kh, m, rng.Uint64(), wa)
						case "equal m across classes":
							m := 1<<53 - 1 - rng.Uint64N(1<<20)
							nodes[a] = hrw.NodeWithM(fmt.Sprintf("t%d", rng.IntN(10)), kh, m, rng.Uint64(), wa)
							nodes[b] = hrw.NodeWithM(fmt.Sprintf("t%d", 10+rng.IntN(10)), kh, m, rng.Uint64(), wb)
						case "near-tie classes":
							// u_b = u_a^(wb/wa) gives equal scores; round m_b and nudge it by
							// a few units either way.
							ma := 1<<53 - 1 - rng.Uint64N(uint64(1<<53)/uint64(4*n))
							ua := float64(ma) * 0x1p-53
							mb := int64(math.Round(math.Exp(wb/wa*math.Log(ua))*0x1p53)) + rng.Int64N(5) - 2
							mb = min(max(mb, 1), 1<<53-1)
							nodes[a] = hrw.NodeWithM(fmt.Sprintf("t%d", rng.IntN(10)), kh, ma, rng.Uint64(), wa)
							nodes[b] = hrw.NodeWithM(fmt.Sprintf("t%d", 10+rng.IntN(10)), kh, uint64(mb), rng.Uint64(), wb)
						}
						r, err := hrw.New(nodes)
						require.NoError(t, err)
						switch {
						case trial > 0 || k < 2:
						case n <= 64: // (weights vary: at most 64 nodes take the keyed path)
							require.True(t, hrw.RankerKeyed(r), "the keyed path must be the one under test")
						case n >= 10*k: // (about 5 % of the nodes have weight 0)
							require.Positive(t, hrw.RankerClasses(r), "the class path must be the one under test")
						}
						want := refPick(kh, nodes)
						require.GreaterOrEqual(t, want, 0)
						got, ok := r.Pick(kh)
						require.True(t, ok)
						require.Equal(t, nodes[want].ID(), got.ID(), "Ranker.Pick trial %d", trial)
						require.Equal(t, want, hrw.Pick(kh, nodes), "Pick trial %d", trial)
					}
				})
			}
		}
	}
}
