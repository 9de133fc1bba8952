package hrw_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// The equal-weight selections switch loops by size (branch-free up to 64 nodes, unrolled
// by four above, with a remainder loop) and detect 53-bit ties differently in each. This
// checks every size class against the naive reference, with exact ties (shared hashes
// with larger and smaller IDs, duplicates) placed at random positions, and with one
// node of another weight or of weight 0 that sends Pick to the weighted selection.
func TestSelectionLoopsEqualReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{1, 2, 7, 8, 63, 64, 65, 66, 67, 68, 100, 513} {
		for _, variant := range []string{"plain", "ties", "duplicates", "one heavier", "one zero"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, variant), func(t *testing.T) {
				for k := range 200 {
					nodes := uniformNodes(t, n)
					kh := hrw.KeyHash(fmt.Sprintf("session-%d", k))
					// Aim the variant at the winner, where ties matter.
					w := refPick(kh, nodes)
					j := rng.IntN(n)
					switch variant {
					case "ties": // a node at j with the winner's hash and a smaller or larger ID
						if j != w {
							id := nodes[w].ID() + "~"
							if k%2 == 0 {
								id = "!" + nodes[w].ID()
							}
							nodes[j] = hrw.NodeWithHash(id, nodes[w].Hash(), 1)
						}
					case "duplicates":
						nodes[j] = nodes[w]
					case "one heavier":
						nodes[j] = mustNode(t, nodes[j].ID(), 1.5)
					case "one zero":
						nodes[j] = mustNode(t, nodes[j].ID(), 0)
					}
					want := refPick(kh, nodes)
					require.Equal(t, want, hrw.Pick(kh, nodes), "Pick key %d", k)
					require.Equal(t, want, hrw.PickFunc(kh, nodes, func(int) bool { return true }), "PickFunc key %d", k)
					var b hrw.Best
					require.Equal(t, want, bestPick(&b, kh, nodes), "Best key %d", k)
					r, err := hrw.New(nodes)
					require.NoError(t, err)
					rn, ok := r.Pick(kh)
					require.Equal(t, want >= 0, ok)
					if ok {
						require.Equal(t, nodes[want], rn, "Ranker.Pick key %d", k)
					}
				}
			})
		}
	}
}

// TestPickCappedScan checks Pick's weighted selection above 128 nodes, whose scan rules
// nodes out against a cap on the weights that rises when a heavier node comes up,
// against the naive reference: weights in random, ascending and descending order, over
// a narrow and a wide range, with zero Nodes at the ends (no first cap from the end
// weights), one much heavier node late in the list, and a later duplicate of the
// winner with a larger weight (which the duplicate rule ignores).
func TestPickCappedScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	for _, n := range []int{129, 130, 200, 513} {
		for _, layout := range []string{"random", "ascending", "descending", "wide", "zero ends", "heavy late", "heavier duplicate"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, layout), func(t *testing.T) {
				for k := range 100 {
					ws := make([]float64, n)
					for i := range ws {
						ws[i] = 0.5 + 3.5*rng.Float64()
						if layout == "wide" {
							ws[i] = math.Exp(rng.Float64()*20 - 10)
						}
					}
					switch layout {
					case "ascending":
						slices.Sort(ws)
					case "descending":
						slices.Sort(ws)
						slices.Reverse(ws)
					case "heavy late":
						ws[n-1-rng.IntN(n/2)] = 40
					}
					nodes := make([]hrw.Node, n)
					for i, w := range ws {
						nodes[i] = mustNode(t, fmt.Sprintf("backend-%d", i), w)
					}
					kh := rng.Uint64()
					switch layout {
					case "zero ends":
						nodes[0], nodes[n-1] = hrw.Node{}, mustNode(t, "w0", 0)
					case "heavier duplicate":
						if w := refPick(kh, nodes); w < n-1 {
							nodes[w+1+rng.IntN(n-1-w)] = mustNode(t, nodes[w].ID(), 1000)
						}
					}
					require.Equal(t, refPick(kh, nodes), hrw.Pick(kh, nodes), "key %d", k)
				}
			})
		}
	}
}
