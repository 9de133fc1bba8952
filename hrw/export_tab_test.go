package hrw

// TabKeyBounds returns, for a mid value z, the bounds of -ln(u) that a Ranker's first
// pass over up to tabMax nodes uses: lo = (X + phiTab[t>>21])·2^-31 (its key before the
// weight), and hi = U(x) at x = lo + 2^-31, the first proof's upper bound (+Inf for
// x >= 1, where the proof refuses). Test-only.
func TabKeyBounds(z uint64) (lo, hi float64) {
	t := z >> 33
	s := 1<<31 - 1 - t + uint64(phiTab[t>>21])
	lo = float64(int64(s)) * 0x1p-31
	x := lo + 0x1p-31
	if x >= 1 {
		return lo, inf
	}
	return lo, x + 0x1p-29 + 0x1p-10*x/(1-x)
}

var inf = 1 / zero

var zero = 0.0

// TabMax is tabMax. Test-only.
const TabMax = tabMax

// RankerTabKeyX is RankerKeyX for the keys of tabSet.first: the bound keyX derives from
// node i's key, the index the key carries, and (S+1)·2^-31 from the node's mix (S = X +
// phiTab[t>>21]). Test-only.
func RankerTabKeyX(r *Ranker, keyHash uint64, i int) (fromKey float64, idx int, exact float64) {
	kp := premix(keyHash)
	b, _ := newTabSet(r.pre[i:i+1], r.iw[i:i+1], r.kd[i:i+1], r.kx[i:i+1], r.kt[i:i+1]).first(kp, newMixer())
	t := mid(kp^r.pre[i]) >> 33
	s := 1<<31 - 1 - t + uint64(phiTab[t>>21])
	return r.keyX(b), int(b & keyIdx), float64(int64(s+1)) * 0x1p-31
}

// RankerFirstProof runs the first pass and first proof of a keyed Ranker with up to
// tabMax live nodes alone: the winner it tries and whether the proof holds. Test-only.
func RankerFirstProof(r *Ranker, keyHash uint64) (int, bool) {
	b, b2 := r.tab.first(premix(keyHash), newMixer())
	i := r.tab.winner(b)
	return i, r.tab.proven(b, b2, i)
}

// TabProven is tabProven, the first proof's test U(x) < T. Test-only.
func TabProven(x, t float64) bool { return tabProven(x, t) }
