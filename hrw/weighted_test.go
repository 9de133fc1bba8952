package hrw_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// checkKeyBounds checks the keyed selection's bounds of L = -ln(u) for the mid value z
// against math.Log: X·2^-31 <= 2^-31·P <= L <= H((X+1)·2^-31) <= B((X+1)·2^-31) for
// every u, and, for 1-u <= 1/2, H <= P·(1+x³/2) + 2^-29 (2^-29 for X vs X+1 and the
// integer floors): the bounds are tight enough to prove winners.
func checkKeyBounds(t *testing.T, z uint64) {
	t.Helper()
	kh := uint64(0x9e3779b97f4a7c15)
	n := hrw.NodeWithMid("n", kh, z, 1)
	u := hrw.Unit(hrw.Mix(kh, n.Hash()))
	l := -math.Log(u)
	lo1, loP, loPFixed, hi := hrw.KeyBounds(z)
	const tiny = 1e-13 // far above the rounding of the bounds and of ln, far below 1e-9
	if !(lo1*0x1p-31 <= l && loPFixed*0x1p-31 <= l*(1+tiny) && loP*0x1p-31 <= l*(1+tiny)) {
		t.Fatalf("z=%#x u=%v: lower bounds %v %v %v above L=%v", z, u, lo1*0x1p-31, loP*0x1p-31, loPFixed*0x1p-31, l)
	}
	if !(loPFixed <= loP*(1+tiny) && lo1 <= loPFixed) {
		t.Fatalf("z=%#x: bounds out of order: %v %v %v", z, lo1, loPFixed, loP)
	}
	if !(hi >= l*(1-tiny)) {
		t.Fatalf("z=%#x u=%v: upper bound %v below L=%v", z, u, hi, l)
	}
	if b := hrw.KeyUpperB(z); !(b >= hi*(1-tiny)) {
		t.Fatalf("z=%#x u=%v: first-pass upper bound %v below H=%v", z, u, b, hi)
	}
	if x := (lo1 + 1) * 0x1p-31; x <= 0.5 && hi > loPFixed*0x1p-31*(1+x*x*x/2)+0x1p-29 {
		t.Fatalf("z=%#x: bounds too loose: %v .. %v", z, loPFixed*0x1p-31, hi)
	}
}

// FuzzKeyBounds checks the bounds over the whole range of u: tiny u (top bits of z
// zero), u = 2^-54 (m = 0), u near 1 and u near 1/2.
func FuzzKeyBounds(f *testing.F) {
	for _, z := range []uint64{0, 1, 1<<33 - 1, 1 << 33, 1<<63 - 1, 1 << 63, 1<<64 - 1, 1<<64 - 1<<33,
		1<<64 - 1<<34, 0x7fffffff << 33, 0x40000000 << 33, 0x3fffffff << 33, 0x5fffffff << 33} {
		f.Add(z)
	}
	f.Fuzz(checkKeyBounds)
}

// TestKeyBoundsSweep runs checkKeyBounds on every top-31-bit value near the ends and
// near u = 1/2, and on random mid values.
func TestKeyBoundsSweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	for _, t0 := range []uint64{0, 1<<30 - 1<<11, 1<<31 - 1<<12} {
		for d := range uint64(1 << 12) {
			checkKeyBounds(t, (t0+d)<<33|rng.Uint64()&(1<<33-1))
		}
	}
	for range 200000 {
		checkKeyBounds(t, rng.Uint64())
	}
}

// TestRankerKeyX checks the upper bound of 1-u that a Ranker's first proof derives from
// the winner's packed key instead of its mix: never below (X+1)·2^-31, within 1e-12 of
// it, and the packed key carries the node's index; over random weight ratios up to 2^30
// (fixed-point inverse weights down to 0) and mid values whose top 31 bits are 0,
// 2^31-1 or random.
func TestRankerKeyX(t *testing.T) {
	checkRankerKeyX(t, rand.New(rand.NewPCG(5, 5)), 2000, 64, hrw.RankerKeyX)
}

// checkRankerKeyX runs trials random Rankers of 2 to maxNodes nodes through keyX (the
// bound a first proof takes from a node's packed key, that bound's node index and the
// exact bound from its mix): the bound is never below the exact one and within 1e-12 of
// it, and the key carries the node's index. Weight ratios up to 2^30, mid values whose top
// 31 bits are 0, 2^31-1 or random.
func checkRankerKeyX(t *testing.T, rng *rand.Rand, trials, maxNodes int,
	keyX func(r *hrw.Ranker, keyHash uint64, i int) (fromKey float64, idx int, exact float64)) {
	t.Helper()
	for trial := range trials {
		kh := rng.Uint64()
		nodes := make([]hrw.Node, 2+rng.IntN(maxNodes-1))
		for i := range nodes {
			z := rng.Uint64()
			switch rng.IntN(4) {
			case 0:
				z &= 1<<33 - 1 // X = 2^31-1: u near 0
			case 1:
				z |= ^uint64(1<<33 - 1) // X = 0: u near 1
			}
			nodes[i] = hrw.NodeWithMid(fmt.Sprintf("b%d", i), kh, z, math.Exp2(30*rng.Float64()))
		}
		r, err := hrw.New(nodes)
		require.NoError(t, err)
		require.True(t, hrw.RankerKeyed(r))
		for i := range nodes {
			got, idx, exact := keyX(r, kh, i)
			require.Equal(t, i, idx, "trial %d node %d", trial, i)
			if !math.IsNaN(got) {
				require.True(t, got >= exact && got <= exact*(1+1e-12), "trial %d node %d: %v for %v", trial, i, got, exact)
			}
		}
	}
}

// TestNodeKeyX is TestRankerKeyX for Pick's first-order float keys, over weights from
// MinWeight to MaxWeight.
func TestNodeKeyX(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	kh := uint64(0x9e3779b97f4a7c15)
	for trial := range 200000 {
		z := rng.Uint64()
		switch trial % 4 {
		case 0:
			z &= 1<<33 - 1 // X = 2^31-1
		case 1:
			z |= ^uint64(1<<33 - 1) // X = 0
		}
		w := math.Pow(10, 560*rng.Float64()-280)
		got, idx, exact := hrw.NodeKeyX(kh, hrw.NodeWithMid("n", kh, z, w))
		require.Equal(t, 0, idx)
		require.True(t, got >= exact && got <= exact*(1+1e-11), "z=%#x w=%v: %v for %v", z, w, got, exact)
	}
}

// TestKeyedNearTies builds sets of 2 to 64 nodes with random weights where two nodes'
// scores are equal up to a few units of m (u_b = u_a^(w_b/w_a), rounded and nudged), or
// share m, and checks the keyed selection of Pick and of a Ranker: whenever it reports
// a proven winner, that is the naive reference's; on random sets it proves most of them.
func TestKeyedNearTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{2, 3, 8, 16, 64} {
		for _, variant := range []string{"random", "near-tie", "equal m"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, variant), func(t *testing.T) {
				proven := 0
				const trials = 400
				for trial := range trials {
					kh := rng.Uint64()
					nodes := make([]hrw.Node, n)
					for i := range nodes {
						nodes[i] = hrw.NodeWithMid(fmt.Sprintf("b%d", i), kh, rng.Uint64(), 0.5+3.5*rng.Float64())
					}
					a := rng.IntN(n)
					b := (a + 1 + rng.IntN(n-1)) % n
					wa, wb := nodes[a].Weight(), nodes[b].Weight()
					ma := 1<<53 - 1 - rng.Uint64N(uint64(1<<53)/uint64(2*n))
					switch variant {
					case "near-tie":
						ua := float64(ma) * 0x1p-53
						mb := int64(math.Round(math.Exp(wb/wa*math.Log(ua))*0x1p53)) + rng.Int64N(5) - 2
						nodes[a] = hrw.NodeWithM("ta", kh, ma, rng.Uint64(), wa)
						nodes[b] = hrw.NodeWithM("tb", kh, uint64(min(max(mb, 1), 1<<53-1)), rng.Uint64(), wb)
					case "equal m":
						nodes[a] = hrw.NodeWithM("ta", kh, ma, rng.Uint64(), wa)
						nodes[b] = hrw.NodeWithM("tb", kh, ma, rng.Uint64(), wb)
					}
					want := refPick(kh, nodes)
					for _, ranker := range []bool{false, true} {
						if got, ok := hrw.PickKeyed(kh, nodes, ranker); ok {
							require.Equal(t, want, got, "trial %d ranker=%v", trial, ranker)
							proven++
						}
					}
					require.Equal(t, want, hrw.Pick(kh, nodes), "Pick trial %d", trial)
					r, err := hrw.New(nodes)
					require.NoError(t, err)
					got, _ := r.Pick(kh)
					require.Equal(t, nodes[want], got, "Ranker.Pick trial %d", trial)
				}
				if variant == "random" && n >= 8 {
					require.Greater(t, proven, 2*trials*9/10, "the keyed selection should prove most winners")
				}
			})
		}
	}
}

// TestZeroNodeAmongWeighted puts zero Nodes (and nodes of weight 0) among 1 to 60 nodes
// of varied weights: Pick matches the naive reference, the keyed selection's first pass
// never makes a zero Node its winner (its stored inverse weight is +0, see minKey), and
// the keyed selection still proves most winners with two or more live nodes.
func TestZeroNodeAmongWeighted(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 3))
	for _, n := range []int{1, 2, 7, 8, 60} {
		for _, zeros := range []int{1, 3} {
			t.Run(fmt.Sprintf("live=%d/zeros=%d", n, zeros), func(t *testing.T) {
				proven := 0
				const trials = 300
				for trial := range trials {
					nodes := make([]hrw.Node, 0, n+zeros+1)
					for i := range n {
						nodes = append(nodes, mustNode(t, fmt.Sprintf("b%d", i), 0.5+3.5*rng.Float64()))
					}
					for range zeros {
						at := rng.IntN(len(nodes) + 1)
						nodes = append(nodes[:at], append([]hrw.Node{{}}, nodes[at:]...)...)
					}
					if trial%2 == 1 {
						nodes = append(nodes, mustNode(t, "w0", 0))
					}
					kh := rng.Uint64()
					want := refPick(kh, nodes)
					require.Equal(t, want, hrw.Pick(kh, nodes), "trial %d", trial)
					first := hrw.KeyedFirst(kh, nodes)
					require.Positive(t, nodes[first].Weight(), "trial %d: first pass chose a node of weight 0", trial)
					if got, ok := hrw.PickKeyed(kh, nodes, false); ok {
						require.Equal(t, want, got, "trial %d", trial)
						proven++
					}
				}
				if n >= 2 {
					require.Greater(t, proven, trials*3/4, "the keyed selection should prove most winners")
				}
			})
		}
	}
}
