package hrw_test

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// checkTabBounds checks the bounds of L = -ln(u) of a Ranker's first pass over up to
// TabMax nodes (the keys with φ) against math.Log: lo <= L <= hi for every u, and, for
// 1-u <= 1/2, hi - lo <= 2^-10·x/(1-x) + 2^-27 (x = lo + 2^-31): tight enough to prove
// most winners.
func checkTabBounds(t *testing.T, z uint64) {
	t.Helper()
	kh := uint64(0x9e3779b97f4a7c15)
	u := hrw.Unit(hrw.Mix(kh, hrw.NodeWithMid("n", kh, z, 1).Hash()))
	l := -math.Log(u)
	lo, hi := hrw.TabKeyBounds(z)
	const tiny = 1e-13 // as in checkKeyBounds
	if !(lo <= l*(1+tiny)) {
		t.Fatalf("z=%#x u=%v: lower bound %v above L=%v", z, u, lo, l)
	}
	if !(hi >= l*(1-tiny)) {
		t.Fatalf("z=%#x u=%v: upper bound %v below L=%v", z, u, hi, l)
	}
	if x := lo + 0x1p-31; x <= 0.5 && hi-lo > 0x1p-10*x/(1-x)+0x1p-27 {
		t.Fatalf("z=%#x: bounds too loose: %v .. %v", z, lo, hi)
	}
}

// FuzzTabKeyBounds is FuzzKeyBounds for the keys with φ.
func FuzzTabKeyBounds(f *testing.F) {
	for _, z := range []uint64{0, 1, 1<<33 - 1, 1 << 33, 1<<63 - 1, 1 << 63, 1<<64 - 1, 1<<64 - 1<<33,
		1<<64 - 1<<34, 0x7fffffff << 33, 0x40000000 << 33, 0x3fffffff << 33, 0x5fffffff << 33, 1<<54 - 1, 1 << 54} {
		f.Add(z)
	}
	f.Fuzz(checkTabBounds)
}

// TestTabKeyBoundsSweep runs checkTabBounds on the top-31-bit values at both edges of
// every table bucket (where the table's lower bound is tightest and loosest), near the
// ends and near u = 1/2, and on random mid values.
func TestTabKeyBoundsSweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2))
	for j := range uint64(1024) {
		for _, d := range []uint64{0, 1, 2, 1<<21 - 3, 1<<21 - 2, 1<<21 - 1} {
			checkTabBounds(t, (j<<21+d)<<33|rng.Uint64()&(1<<33-1))
		}
	}
	for _, t0 := range []uint64{0, 1<<30 - 1<<11, 1<<31 - 1<<12} {
		for d := range uint64(1 << 12) {
			checkTabBounds(t, (t0+d)<<33|rng.Uint64()&(1<<33-1))
		}
	}
	for range 200000 {
		checkTabBounds(t, rng.Uint64())
	}
}

// TestRankerTabKeyX is TestRankerKeyX for the keys with φ (2 to TabMax nodes): the bound
// from the key is never below (S+1)·2^-31 and within 1e-12 of it, and the key carries
// the node's index.
func TestRankerTabKeyX(t *testing.T) {
	checkRankerKeyX(t, rand.New(rand.NewPCG(5, 6)), 20000, hrw.TabMax, hrw.RankerTabKeyX)
}

// TestTabFirstProof checks a Ranker's first proof alone over 2 to TabMax nodes, on
// random sets and on built near-ties (two scores equal up to a few units of m, or equal
// m), with weights from 0.5 to 4 and with weight ratios up to 2^30: whenever it holds,
// its winner is the naive reference's; on random sets of TabMax nodes with weights from
// 0.5 to 4 it holds for at least 98 % of the keys (the first-order keys: about 87 %).
func TestTabFirstProof(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, n := range []int{2, 3, 5, hrw.TabMax} {
		for _, variant := range []string{"random", "near-tie", "equal m", "wide"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, variant), func(t *testing.T) {
				held := 0
				const trials = 3000
				for trial := range trials {
					kh := rng.Uint64()
					nodes := make([]hrw.Node, n)
					for i := range nodes {
						w := 0.5 + 3.5*rng.Float64()
						if variant == "wide" {
							w = math.Exp2(30 * rng.Float64())
						}
						nodes[i] = hrw.NodeWithMid(fmt.Sprintf("b%d", i), kh, rng.Uint64(), w)
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
					r, err := hrw.New(nodes)
					require.NoError(t, err)
					require.True(t, hrw.RankerKeyed(r))
					if got, ok := hrw.RankerFirstProof(r, kh); ok {
						require.Equal(t, refPick(kh, nodes), got, "trial %d", trial)
						held++
					}
				}
				if variant == "random" && n == hrw.TabMax {
					require.GreaterOrEqual(t, held, trials*98/100, "the first proof should hold for most keys")
				}
			})
		}
	}
}

// TestTabProven checks the first proof's test against U(x) = x + 2^-29 + 2^-10·x/(1-x)
// computed with 200-bit floats, for x from 2^-31 to just below 1 and T within 2^-30 of
// U(x) on both sides: whenever it holds, U(x) < T·(1+2^-49) (the rounding the proof in
// weighted.go allows for); and it holds whenever U(x)·(1+2^-44) <= T (it is not looser
// than U). For x >= 1 and for NaN it never holds.
func TestTabProven(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	xs := []float64{0x1p-31, 0x2p-31, 0x5p-31, 0x1p-20, 0x1p-10, 0.1, 0.25, 0.5, 0.6, 0.75, 0.9,
		0.99, 1 - 0x1p-20, 1 - 0x1p-31, 1 - 0x1p-52}
	for range 20000 {
		xs = append(xs, math.Exp2(-31*rng.Float64()), float64(1+rng.Uint64N(1<<31-1))*0x1p-31)
	}
	const prec = 200
	for _, x := range xs {
		bx := new(big.Float).SetPrec(prec).SetFloat64(x)
		one := new(big.Float).SetPrec(prec).SetInt64(1)
		q := new(big.Float).SetPrec(prec).Quo(bx, new(big.Float).SetPrec(prec).Sub(one, bx))
		u := new(big.Float).SetPrec(prec).Add(bx, big.NewFloat(0x1p-29))
		u.Add(u, q.Mul(q, big.NewFloat(0x1p-10)))
		for _, d := range []float64{-0x1p-30, -0x1p-44, -0x1p-47, -0x1p-49, 0, 0x1p-49, 0x1p-47, 0x1p-44, 0x1p-30} {
			tf, _ := new(big.Float).SetPrec(prec).Mul(u, big.NewFloat(1+d)).Float64()
			bt := new(big.Float).SetPrec(prec).SetFloat64(tf)
			if hrw.TabProven(x, tf) {
				lim := new(big.Float).SetPrec(prec).Mul(bt, big.NewFloat(1+0x1p-49))
				require.Negative(t, u.Cmp(lim), "x=%v T=%v: holds although U(x) >= T·(1+2^-49)", x, tf)
			}
			if tight := new(big.Float).SetPrec(prec).Mul(u, big.NewFloat(1+0x1p-44)); tight.Cmp(bt) <= 0 {
				require.True(t, hrw.TabProven(x, tf), "x=%v T=%v: fails although U(x)·(1+2^-44) <= T", x, tf)
			}
		}
	}
	for _, x := range []float64{1, 1 + 0x1p-52, 1.5, 2, math.Inf(1), math.NaN()} {
		for _, tf := range []float64{0, 1, 3, 1e300, math.Inf(1), math.NaN()} {
			require.False(t, hrw.TabProven(x, tf), "x=%v T=%v", x, tf)
		}
	}
	require.False(t, hrw.TabProven(math.NaN(), 0.5))
	require.False(t, hrw.TabProven(0.1, math.NaN()))
}
