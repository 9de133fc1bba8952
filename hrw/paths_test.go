package hrw_test

import (
	"fmt"
	"math/rand/v2"
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
