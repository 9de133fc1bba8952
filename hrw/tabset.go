package hrw

// tabSet is a Ranker's first pass and first proof over 2 to tabMax live nodes of varied
// weights (the keys with φ, see the proof in weighted.go), in one block that New fills
// and Ranker.Pick reaches in one call from pickUniform: fixed arrays instead of slices,
// so that the loop has no bounds checks and its arguments (the set, the key and the
// mixer) all travel in registers. The loop takes two nodes per iteration (no spills; by
// four it spills) up to the constant tabMax, so the nodes sit at the end of the arrays,
// from the even start on, and a set of odd size has one padding node after them with
// iw = kd = 0, whose complemented key is 0 for every key: it can neither win nor be the
// runner-up, as every real node's complemented key is above 0 (its key is below
// 2^64-1). The arrays hold tabMax+1 entries so that the compiler, which does not know
// that start is even, sees i+1 in range; the last is never read.
type tabSet struct {
	pre, iw, kd [tabMax + 1]uint64 // as the Ranker's, node i at start + i; kd keeps i
	start       uint               // tabMax minus the node count rounded up to even
	kx          [tabMax]float64    // the Ranker's kx, by node index (for keyX)
	kt          [tabMax]float64    // the Ranker's kt/2: T = (b2>>6)·kt[i]
}

// newTabSet returns the tabSet over the nodes with the given prepared values (2 to
// tabMax of them, one per node; kt as the Ranker's, 2T per key unit).
func newTabSet(pre, iw, kd []uint64, kx, kt []float64) *tabSet {
	s := &tabSet{start: uint(tabMax - (len(pre)+1)&^1)}
	for i := range pre {
		j := int(s.start) + i
		s.pre[j], s.iw[j], s.kd[j] = pre[i], iw[i], kd[i]
		s.kx[i], s.kt[i] = kx[i], kt[i]/2 // exact
	}
	return s
}

// first is minKeyFixed with the keys with φ, S·iw[i] for S = X + g, g = phiTab[t>>21]:
// t·iw[i] + kd[i] becomes (t-g)·iw[i] + kd[i] = ^(S·iw[i] | i) modulo 2^64, where S <
// 2^32 and iw[i] <= 2^32 keep S·iw[i] + 63 below 2^64. It returns the smallest and the
// second smallest packed keys. Not inlined, for the mixer's registers; with anything
// after the loop in the same function the compiler turns the running maximum into a
// branch, which mispredicts.
//
//go:noinline
func (s *tabSet) first(kp uint64, c mixer) (b, b2 uint64) {
	for i := s.start; i < tabMax; i += 2 { // complemented keys, as in minKey
		t := c.mid(kp^s.pre[i]) >> 33
		v := (t-uint64(phiTab[t>>21]))*s.iw[i] + s.kd[i]
		b2 = max(b2, v)
		if b < v {
			b2 = b
		}
		b = max(b, v)
		t = c.mid(kp^s.pre[i+1]) >> 33
		v = (t-uint64(phiTab[t>>21]))*s.iw[i+1] + s.kd[i+1]
		b2 = max(b2, v)
		if b < v {
			b2 = b
		}
		b = max(b, v)
	}
	return ^b, ^b2
}

// winner returns the index that first's smallest key b carries.
func (s *tabSet) winner(b uint64) int { return int(b & (tabMax - 1)) }

// proven is the first proof after first, for the owner i of b: U(x) < T with x from
// the winner's key (keyX) and T from the runner-up's key b2.
func (s *tabSet) proven(b, b2 uint64, i int) bool {
	x := float64(int64(b>>6))*s.kx[i] + 0x1p-31 // keyX
	return tabProven(x, float64(int64(b2>>6))*s.kt[i])
}

// tabProven is the first proof's test U(x) < T, computed as d = T - (x + 2^-29) > 0 and
// d·(1-x) > 2^-10·x (see the proof in weighted.go). False for x >= 1 and for NaN.
func tabProven(x, t float64) bool {
	d := t - (x + 0x1p-29)
	return d > 0 && d*(1-x) > 0x1p-10*x
}
