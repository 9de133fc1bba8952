package hrw_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// nodeWithX builds a node whose mid value for kh has X = floor(x·2^31) (1-u in
// (X·2^-31, (X+1)·2^-31]) and random low bits.
func nodeWithX(rng *rand.Rand, id string, kh uint64, x, w float64) hrw.Node {
	X := uint64(x * 0x1p31)
	return hrw.NodeWithMid(id, kh, (1<<31-1-X)<<33|rng.Uint64()&(1<<33-1), w)
}

// TestSecondPassOvertakes forces the second pass of the keyed selections with a light
// node a that wins although a heavy node b has the smaller first-order key (X_b/w_b =
// X_a/w_a·(1-δ), δ below (x_b-x_a)/2, the first-order keys' error), and other nodes
// whose first-order keys lie up to 8 % above a's (some of them within the first pass's
// error too). Pick, the keyed selections (whenever they report a proven winner) and
// Ranker.Pick must all match the naive reference; most trials must have a first-pass
// winner that is not the true one, and the second pass must prove most winners.
func TestSecondPassOvertakes(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 2))
	for _, n := range []int{2, 8, 17, 64} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			const trials = 500
			overtaken, proven := 0, 0
			for trial := range trials {
				kh := rng.Uint64()
				k := 0.002 + 0.018*rng.Float64() // a's first-order key, as x/w
				wa, wb := 0.5+0.5*rng.Float64(), 2+2*rng.Float64()
				xa, xb := k*wa, k*wb
				d := (0.2 + 0.6*rng.Float64()) * (xb - xa) / 2
				nodes := make([]hrw.Node, n)
				for i := range nodes {
					w := 0.5 + 3.5*rng.Float64()
					nodes[i] = nodeWithX(rng, fmt.Sprintf("b%d", i), kh, math.Min(k*(1+0.08*rng.Float64())*w, 0.99), w)
				}
				a := rng.IntN(n)
				b := (a + 1 + rng.IntN(n-1)) % n
				nodes[a] = nodeWithX(rng, "ta", kh, xa, wa)
				nodes[b] = nodeWithX(rng, "tb", kh, xb*(1-d), wb)
				want := refPick(kh, nodes)
				if hrw.KeyedFirst(kh, nodes) != want {
					overtaken++
				}
				require.Equal(t, want, hrw.Pick(kh, nodes), "Pick trial %d", trial)
				for _, ranker := range []bool{false, true} {
					if got, ok := hrw.PickKeyed(kh, nodes, ranker); ok {
						require.Equal(t, want, got, "trial %d ranker=%v", trial, ranker)
						proven++
					}
				}
				r, err := hrw.New(nodes)
				require.NoError(t, err)
				got, _ := r.Pick(kh)
				require.Equal(t, nodes[want], got, "Ranker.Pick trial %d", trial)
			}
			require.Greater(t, overtaken, trials/2, "the first pass should pick a wrong winner in most trials")
			require.Greater(t, proven, 2*trials*9/10, "the second pass should prove most winners")
		})
	}
}
