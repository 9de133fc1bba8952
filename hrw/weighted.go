package hrw

import "math"

// The weighted selection over up to packedMax nodes: a branch-free loop orders the
// nodes by a lower bound of 1/s = -ln(u)/w taken with no logarithm, and a test after it
// proves that the node with the smallest bound is the exact winner (the logarithmic
// method of Schindelhauer and Schomaker, SPAA 2005, with ln replaced by bounds: the
// placement is unchanged).
//
// Bounds. With x = 1-u in (0,1), -ln(u) = Σ_{k>=1} x^k/k with every term positive, so
//
//	x <= P(x) = x + x²/2 + x³/3 + x⁴/4 <= -ln(u) <= H(x) = P(x) + x⁵/(5(1-x)),
//
// since the terms from x⁵ on sum to at most x⁵/5·Σ x^j. (For x <= 1/2, 1/(5(1-x)) <= 0.4.)
// The loops do not finish the mix: the top 31 bits t of the unfinished mix z are those of
// the finished one (see mid), so with X = 2^31-1-t, X·2^-31 < x <= (X+1)·2^-31.
// A node's key is k = X·r (first order) or k = 2^31·P(X·2^-31)·r, where r = 1/w
// (binary64; +Inf for weight 0, which then never has the smallest key), except for a
// [Ranker]'s first-order keys: r = floor(2^26·wmin/w) (integer keys, every step rounded
// down). Either way k <= 2^31·sc·(-ln u)/w·(1+ρ), with sc = 1 (binary64) or 2^26·wmin
// (integers) and ρ <= 8·2^-53 for the rounding of the binary64 operations. The low 6 bits of a packed key hold the index
// (float keys are truncated there, integer keys shifted up), so that one unsigned
// minimum finds the smallest key with its index, and a second one the runner-up.
//
// Proof of the winner. Let c own the smallest key and k2 be the runner-up's (truncated)
// key; every other node's key is at least k2. If, with x_c = (X_c+1)·2^-31 >= 1-u_c,
//
//	H(x_c)·2^31·sc·(1+1e-9) < k2·w_c      (computed in binary64),
//
// then for every other node j: -ln(u_c)/w_c·(1+1e-9)(1-ρ') < k2/(2^31·sc) <=
// k_j/(2^31·sc) <= -ln(u_j)/w_j·(1+ρ), with ρ' <= 16·2^-53 for the rounding of the test.
// The computed scores differ from these by a few ulps (ln is accurate to 1 ulp, then one
// division), and 1e-9 is about 10^6 times all of these, so ŝ_c > ŝ_j strictly: c is first
// in the canonical order whatever the tie-breaks. The first-order keys prove the winner
// unless the two smallest are within about x_c/2 of each other (13 % of the keys at 8
// nodes with weights from 0.5 to 4, 1.7 % at 64); then the keys with P are taken
// (within about x_c⁴/5), and if those fail too (0.5-0.8 % of the keys at 8 nodes, 0.01 %
// at 64), or no weight is positive, the exact selection runs. The fuzz test checks the
// bounds against math.Log over the whole range of u; the property tests check the
// placement against the naive reference, with built near-ties. A Ranker's first proof
// takes x_c from the winner's exact integer key rather than from its mix (keyX; a test
// checks it against the mix).
//
// Keys with φ (a Ranker's first pass over up to tabMax live nodes). With
// φ(x) = -ln(1-x) - x = Σ_{k>=2} x^k/k, increasing, and the bucket j = t>>21 of t
// (X >= X_j = (1023-j)·2^21, so x_j = X_j·2^-31 < x, and (X+1)·2^-31 <= x_j + 2^-10),
// the table holds g_j = min(max(floor(2^31·φ̂(x_j)) - 2, 0), 2^31), φ̂ = -log1p(-x_j) - x_j
// in binary64: log1p is within an ulp and φ̂ < 6, so |2^31·(φ̂ - φ)| < 2^-18 and
// 2^31·φ(x_j) - 4 <= g_j <= 2^31·φ(x_j) - 1 unless clamped (a clamp to 0 keeps
// g_j + 4 >= 2^31·φ(x_j), one to 2^31 keeps the lower bound). The key is
// S = X + g_j <= 2^31·(x + φ(x)) = -2^31·ln(u), times r = floor(2^26·wmin/w) as above:
// k <= 2^31·sc·(-ln u)/w exactly (integers). It misses -ln u by at most the bucket's
// rise of φ, 2^-10·x/(1-x), and 5·2^-31: about a thousandth of x_c against x_c/2 for the
// first-order keys. The proof's upper bound for the winner, with x' >= (S+1)·2^-31 >=
// (X+1)·2^-31 from its key (keyX), is for x' < 1
//
//	-ln(u_c) <= (X+1)·2^-31 + φ(x_j) + (φ((X+1)·2^-31) - φ(x_j))
//	         <= (S+1)·2^-31 + 2^-29 + 2^-10·x'/(1-x') = U(x'),
//
// as φ(x_j) <= (g_j+4)·2^-31 and φ' = x/(1-x) is increasing; the test is U(x') < T,
// computed as d = T - (x' + 2^-29) > 0 and d·(1-x') > 2^-10·x' (tabProven). x' >= 1,
// from 1-u above about 0.65 on and wherever the table clamps, fails (d > 0 and
// 1-x' <= 0 give d·(1-x') <= 0 < 2^-10·x'), and so does NaN. Rounding: with the sum,
// the difference, 1-x' and the product each within a factor 1±2^-53 (2^-10·x' is
// exact), d > 0 and the product above 2^-10·x' > 0 give x' < 1 and
// T - (x'+2^-29)(1+e) > 2^-10·x'/(1-x')·(1-3·2^-53), so U(x') < T·(1+4·2^-53): with
// T's own rounding within ρ' <= 16·2^-53 as for the loose test, so the argument above
// stands with U for H (TestTabProven checks the test against U in 200-bit floats). It
// fails for 0.5 % of the keys at 8 nodes (13 % with first-order keys) and 0.1 % at 64
// (1.8 %), but costs a shift, a load and a subtraction per node, 0.4 ns: at 64 nodes
// more than the second passes it saves. A sweep over every bucket's edges and a fuzz
// test check S·2^-31 <= -ln u <= U against math.Log.

// keyIdx masks the index bits of a packed key.
const keyIdx = packedMax - 1

// minKey returns the smallest and second smallest packed first-order keys of nodes (at
// most packedMax of them); ^0 stands for a missing node. It keeps the two largest
// complemented keys ^v instead (the same order, reversed: one compare against each and
// three single-flag conditional moves per node, where the two smallest take two
// two-micro-op "above" moves). Not inlined, so that c stays in registers (see mixer).
//
//go:noinline
func minKey(kp uint64, nodes []Node, c mixer) (b, b2 uint64) {
	for i := range nodes {
		r := 1 / nodes[i].weight // ready long before x: off the critical path
		v := ^(math.Float64bits(float64(int64(lowX(c.mid(kp^nodes[i].pre))))*r)&^keyIdx | uint64(i))
		b2 = max(b2, v)
		if b < v {
			b2 = b
		}
		b = max(b, v)
	}
	return ^b, ^b2
}

// minKeyP is minKey with the keys from P.
//
//go:noinline
func minKeyP(kp uint64, nodes []Node, c mixer) (b, b2 uint64) {
	for i := range nodes {
		r := 1 / nodes[i].weight
		v := ^(math.Float64bits(lowP(float64(int64(lowX(c.mid(kp^nodes[i].pre)))))*r)&^keyIdx | uint64(i))
		b2 = max(b2, v)
		if b < v {
			b2 = b
		}
		b = max(b, v)
	}
	return ^b, ^b2
}

// minKeyFixed is minKey over a Ranker's contiguous hashes and fixed-point inverse
// weights iw (integer keys, iw[i] = 64·r), with the complemented packed key built in two
// operations from t = z>>33 = 2^31-1-X: t·iw[i] + kd[i] = ^(X·iw[i] | i) modulo 2^64 for
// kd[i] = -((2^31-1)·iw[i] + i + 1), where ^(X·iw[i] | i) takes a complement, a shift, a
// product, a shift and two more logical operations (X·iw[i] < 2^63: no wrap).
//
//go:noinline
func minKeyFixed(kp uint64, pre, iw, kd []uint64, c mixer) (b, b2 uint64) {
	iw, kd = iw[:len(pre)], kd[:len(pre)]
	for i, h := range pre { // complemented keys, as in minKey
		v := c.mid(kp^h)>>33*iw[i] + kd[i]
		b2 = max(b2, v)
		if b < v {
			b2 = b
		}
		b = max(b, v)
	}
	return ^b, ^b2
}

// tabMax is the largest number of live nodes for which a Ranker's first pass takes the
// keys with φ (tabSet.first): 0.4 ns more per node than minKeyFixed, which the rarer
// second pass repays at 8 nodes (13 % -> 0.5 % of the keys) but not at 64 (1.8 % ->
// 0.1 %). A power of two: the packed key's index bits mask to it.
const tabMax = 8

// proven reports whether the node with premixed hash pre, owner of the smallest key,
// provably wins against every node whose key is at least k2, the runner-up's key, for
// t = k2·w/sc (w the node's weight, sc the keys' scale: see the proof above). It takes
// 1-u <= (X+1)·2^-31, so that it needs no finished mix. False for w == 0 or k2 = NaN.
// With tight (after the keys from P) it tests H; otherwise (after the first-order
// keys, themselves loose by about x/2) the looser B(x) = x + x²/(2(1-x)) =
// x + x²/2 + x³/2 + ... >= H(x), as B(x) < T <=> x(2-x) < 2T(1-x): two products and no
// chain of five, which is most of the latency between the loop and the result.
func proven(kp, pre uint64, t float64, tight bool) bool {
	x := float64(int64(lowX(mid(kp^pre))+1)) * 0x1p-31
	t *= 1 / (0x1p31 * (1 + 1e-9))
	if tight {
		return upH(x) < t
	}
	return x*(2-x) < 2*t*(1-x) // 2-x and 1-x are exact (x has 31 fraction bits)
}

// lowX returns X = 2^31-1-t for the top 31 bits t of a mid value z: 1-u lies in
// (X·2^-31, (X+1)·2^-31].
func lowX(z uint64) uint64 { return ^z >> 33 }

// lowP returns 2^31·P(X·2^-31) for X as a float (rounded: see the proof above).
func lowP(x float64) float64 {
	x2 := x * x
	return x + x2*(0x1p-32+x*(0x1p-62/3)+x2*0x1p-95)
}

// upH returns H(x) for x in (0,1) (rounded: see the proof above; +Inf for x = 1).
func upH(x float64) float64 {
	r := 0.4 // >= 1/(5(1-x)) for x <= 1/2: no division on the usual path
	if x > 0.5 {
		r = 1 / (5 * (1 - x))
	}
	x2 := x * x
	return x + x2*(0.5+x*(1.0/3)+x2*(0.25+x*r))
}

// pickKeyed is the weighted selection over at most packedMax nodes, with later duplicates
// counted as distinct nodes; ok=false: not proven, run the exact selection. Its first
// proof is proven's loose test with x from the winner's key (keyNodeX) instead of its
// mix, as in the Ranker's.
func pickKeyed(kp uint64, nodes []Node) (int, bool) {
	b, b2 := minKey(kp, nodes, newMixer())
	i := int(b & keyIdx)
	w := nodes[i].weight
	if x := keyNodeX(b, w); x*(2-x) < math.Float64frombits(b2&^keyIdx)*(w*(2/(0x1p31*(1+1e-9))))*(1-x) {
		return i, true
	}
	b, b2 = minKeyP(kp, nodes, newMixer())
	i = int(b & keyIdx)
	return i, proven(kp, nodes[i].pre, math.Float64frombits(b2&^keyIdx)*nodes[i].weight, true)
}

// keyNodeX is keyX for minKey's first-order float key b of a node of weight w: the
// truncated key times w is X within 2^-45 relative (1/w and the product rounded, 6 bits
// truncated), so x = k·w·2^-31·(1+2^-40) + 2^-31 >= (X+1)·2^-31 (for X = 0 exactly
// 2^-31). Weight 0 gives +Inf·0 = NaN, which fails every test.
func keyNodeX(b uint64, w float64) float64 {
	return math.Float64frombits(b&^keyIdx)*(w*(0x1p-31*(1+0x1p-40))) + 0x1p-31
}

// pickKeyed is the package-level pickKeyed over the Ranker's live nodes (at most
// packedMax; no duplicates; over up to tabMax live nodes pickUniform runs tab's first
// pass instead). Its first proof is proven's loose test without the winner's mix: x
// from keyX, and 2T = (b2>>6)·kt[i]. That takes two conversions and a few products
// after the loop instead of a load, the mix and a conversion.
func (r *Ranker) pickKeyed(kp uint64) (int, bool) {
	b, b2 := minKeyFixed(kp, r.pre, r.iw, r.kd, newMixer())
	i := int(b & keyIdx)
	if x := r.keyX(b); x*(2-x) < float64(int64(b2>>6))*r.kt[i]*(1-x) {
		return i, true
	}
	return r.pickKeyedP(kp)
}

// pickKeyedP is pickKeyed's second pass, Pick's (minKeyP over the live nodes): keys
// from P in binary64 leave the integer multiplier, which the mix needs, to the mix
// (four integer products per node fewer than with keys from P in integers).
func (r *Ranker) pickKeyedP(kp uint64) (int, bool) {
	b, b2 := minKeyP(kp, r.live, newMixer())
	i := int(b & keyIdx)
	return i, proven(kp, r.pre[i], math.Float64frombits(b2&^keyIdx)*r.live[i].weight, true)
}

// keyX returns x >= (X+1)·2^-31 >= 1-u for the owner i of the first-order packed key b
// of minKeyFixed, without its mix: the key is exact, b>>6 = X·iw[i]/64, so
// x = (b>>6)·kx[i] + 2^-31 with kx[i] = 2^-31·64/iw[i] rounded up by 2^-40 relative,
// which covers the rounding of the conversion, the product and the sum (and is far
// inside proven's 1e-9 margin). iw[i] = 0 gives 0·Inf = NaN, which fails every test.
// For a key of tabSet.first, b>>6 = S·iw[i]/64 and so x >= (S+1)·2^-31 (S = X + g >= X).
func (r *Ranker) keyX(b uint64) float64 {
	return float64(int64(b>>6))*r.kx[b&keyIdx] + 0x1p-31
}
