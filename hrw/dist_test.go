package hrw_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// within4Sigma asserts that count is within ±4 binomial standard deviations of n·p.
func within4Sigma(t *testing.T, count, n int, p float64, msg string) {
	t.Helper()
	mean := float64(n) * p
	sigma := math.Sqrt(float64(n) * p * (1 - p))
	assert.InDelta(t, mean, float64(count), 4*sigma, "%s: got %d, want %.1f ± %.1f", msg, count, mean, 4*sigma)
}

func winners(nodes []hrw.Node, keys []string) []int {
	out := make([]int, len(keys))
	for i, k := range keys {
		out[i] = hrw.Pick(hrw.KeyHash(k), nodes)
	}
	return out
}

func TestDistributionUniform(t *testing.T) {
	for name, keys := range keySets() {
		for _, n := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s/N=%d", name, n), func(t *testing.T) {
				nodes := uniformNodes(t, n)
				counts := make([]int, n)
				for _, w := range winners(nodes, keys) {
					require.GreaterOrEqual(t, w, 0)
					counts[w]++
				}
				for i, c := range counts {
					within4Sigma(t, c, len(keys), 1/float64(n), nodes[i].ID())
				}
			})
		}
	}
}

func TestDistributionWeighted(t *testing.T) {
	weights := []float64{1, 2, 3, 4, 0.5, 9.5}
	total := 20.0
	nodes := make([]hrw.Node, len(weights))
	for i, w := range weights {
		nodes[i] = mustNode(t, fmt.Sprintf("backend-%d", i), w)
	}
	for name, keys := range keySets() {
		t.Run(name, func(t *testing.T) {
			counts := make([]int, len(nodes))
			for _, w := range winners(nodes, keys) {
				counts[w]++
			}
			for i, c := range counts {
				within4Sigma(t, c, len(keys), weights[i]/total, nodes[i].String())
			}
		})
	}
}

// Raising one weight moves keys only to that backend, and its share follows.
func TestRaisingWeightMovesKeysOnlyToIt(t *testing.T) {
	before := uniformNodes(t, 8)
	after := append([]hrw.Node(nil), before...)
	after[3] = mustNode(t, "backend-3", 3) // share 3/10
	for name, keys := range keySets() {
		t.Run(name, func(t *testing.T) {
			w0, w1 := winners(before, keys), winners(after, keys)
			moved, won := 0, 0
			for i := range keys {
				if w0[i] != w1[i] {
					moved++
					require.Equal(t, 3, w1[i], "key %q moved from %d to %d", keys[i], w0[i], w1[i])
				}
				if w1[i] == 3 {
					won++
				}
			}
			within4Sigma(t, won, len(keys), 3.0/10, "backend-3 share after")
			// Expected moves: 3/10 - 1/8 of the keys.
			within4Sigma(t, moved, len(keys), 3.0/10-1.0/8, "moved")
		})
	}
}

func TestWeightZeroNeverWins(t *testing.T) {
	nodes := uniformNodes(t, 4)
	nodes[2] = mustNode(t, "backend-2", 0)
	counts := make([]int, 4)
	for _, w := range winners(nodes, keySets()["s"]) {
		counts[w]++
	}
	assert.Zero(t, counts[2])
	for _, i := range []int{0, 1, 3} {
		within4Sigma(t, counts[i], 10000, 1.0/3, nodes[i].ID())
	}
	// A single positive node wins everything, however small its weight.
	tiny := []hrw.Node{mustNode(t, "a", 0), mustNode(t, "b", hrw.MinWeight), mustNode(t, "c", 0)}
	for i := range 1000 {
		require.Equal(t, 1, hrw.Pick(hrw.KeyHash(fmt.Sprint(i)), tiny))
	}
}

// Extreme but valid weights keep exact behaviour (finite scores, correct pruning).
func TestExtremeWeights(t *testing.T) {
	nodes := []hrw.Node{
		mustNode(t, "huge", hrw.MaxWeight), mustNode(t, "tiny", hrw.MinWeight),
		mustNode(t, "one", 1), mustNode(t, "huge2", hrw.MaxWeight/3),
	}
	for i := range 2000 {
		kh := hrw.KeyHash(fmt.Sprintf("s%d", i))
		for _, n := range nodes {
			s := hrw.Score(kh, n)
			require.False(t, math.IsInf(s, 0) || math.IsNaN(s) || s <= 0 || s < 0x1p-1022, "%v: %g", n, s)
		}
		require.Equal(t, refRank(kh, nodes, nil), hrw.Rank(kh, nodes))
		require.Equal(t, refPick(kh, nodes), hrw.Pick(kh, nodes))
	}
}

// Removing one of 64 backends moves exactly its keys, each to its runner-up; adding a
// 65th moves only keys that now go to the newcomer, about 1/65 of them.
func TestMinimalDisruption(t *testing.T) {
	nodes := uniformNodes(t, 64)
	weighted := make([]hrw.Node, 64)
	for i := range weighted {
		weighted[i] = mustNode(t, fmt.Sprintf("backend-%d", i), float64(1+i%4))
	}
	for _, set := range []struct {
		name  string
		nodes []hrw.Node
		newW  float64
		total float64
	}{{"uniform", nodes, 1, 64}, {"weighted", weighted, 2.5, 160}} {
		for name, keys := range keySets() {
			if set.name == "weighted" && name != "uuid" {
				continue // keep -race runs short: one key set for the weighted case
			}
			t.Run(set.name+"/"+name, func(t *testing.T) {
				base := set.nodes
				const removed = 17
				fewer := append(append([]hrw.Node(nil), base[:removed]...), base[removed+1:]...)
				more := append(append([]hrw.Node(nil), base...), mustNode(t, "backend-64", set.newW))
				owned, movedOnRemove, movedOnAdd := 0, 0, 0
				top := make([]int, 0, 2)
				for _, k := range keys {
					kh := hrw.KeyHash(k)
					rank := hrw.TopK(top[:0], kh, base, 2) // winner and runner-up
					w := hrw.Pick(kh, base)
					require.Equal(t, rank[0], w)
					got := base[w].ID()
					after := fewer[hrw.Pick(kh, fewer)].ID()
					if w == removed {
						owned++
						assert.Equal(t, base[rank[1]].ID(), after, "key %q goes to its runner-up", k)
					}
					if after != got {
						movedOnRemove++
					}
					added := more[hrw.Pick(kh, more)].ID()
					if added != got {
						movedOnAdd++
						require.Equal(t, "backend-64", added, "key %q moved elsewhere", k)
					}
				}
				assert.Equal(t, owned, movedOnRemove, "exactly the removed backend's keys move")
				assert.Positive(t, owned)
				within4Sigma(t, movedOnAdd, len(keys), set.newW/(set.total+set.newW), "moved to the newcomer")
			})
		}
	}
}

// Pinned placement counts (golden, like the vectors): any change to the hash, the mixer,
// the u mapping or the weighted score changes them.
func TestDistributionPinnedCounts(t *testing.T) {
	uniform := uniformNodes(t, 4)
	weighted := []hrw.Node{
		mustNode(t, "backend-0", 1), mustNode(t, "backend-1", 2),
		mustNode(t, "backend-2", 3), mustNode(t, "backend-3", 4),
	}
	tests := []struct {
		keys              string
		uniform, weighted []int
	}{
		{"s", []int{2496, 2480, 2517, 2507}, []int{973, 1995, 3030, 4002}},
		{"uuid", []int{2494, 2488, 2537, 2481}, []int{967, 1969, 3120, 3944}},
		{"conv", []int{2484, 2500, 2507, 2509}, []int{979, 1998, 3029, 3994}},
	}
	sets := keySets()
	assert.Equal(t, []string{
		"870a52b8-c752-4fe6-861b-0a9d1e8c30ec",
		"786f3a1d-5040-4ccd-b9f4-c044f7d2f317",
		"a707dbc2-f71a-45f4-ab18-1f559a40675c",
	}, sets["uuid"][:3], "fixed-seed UUIDv4 keys")
	for _, tt := range tests {
		t.Run(tt.keys, func(t *testing.T) {
			cu, cw := make([]int, 4), make([]int, 4)
			for _, w := range winners(uniform, sets[tt.keys]) {
				cu[w]++
			}
			for _, w := range winners(weighted, sets[tt.keys]) {
				cw[w]++
			}
			assert.Equal(t, tt.uniform, cu, "uniform")
			assert.Equal(t, tt.weighted, cw, "weights 1:2:3:4")
		})
	}
}
