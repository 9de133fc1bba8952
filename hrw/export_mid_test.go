package hrw

// NodeWithMid builds a node whose mid value (splitmix64 of premix(keyHash) ^ node hash
// before its last xorshift) is exactly z for keyHash, by inverting mid, so tests can
// place nodes whose top 31 bits tie while their m values order either way. Test-only.
func NodeWithMid(id string, keyHash, z uint64, weight float64) Node {
	c := newMixer()
	z *= inverse(c.k2)
	z ^= z>>27 ^ z>>54 // inverts x ^= x>>27
	z *= inverse(c.k1)
	return Node{id: id, pre: z ^ premix(keyHash), weight: weight}
}

// MidOf returns mid(premix(keyHash) ^ n.pre). Test-only.
func MidOf(keyHash uint64, n Node) uint64 { return mid(premix(keyHash) ^ n.pre) }

// inverse returns the multiplicative inverse of an odd k modulo 2^64 (Newton's
// iteration doubles the correct low bits each step: 3 -> 6 -> ... -> 96).
func inverse(k uint64) uint64 {
	x := k
	for range 5 {
		x *= 2 - k*x
	}
	return x
}

// NodeWithM builds a node whose m (Mix >> 11) is exactly m for keyHash, by inverting the
// last xorshift too (low 11 bits of the mixed value from lowBits). Test-only.
func NodeWithM(id string, keyHash, m, lowBits uint64, weight float64) Node {
	y := m<<11 | lowBits&(1<<11-1)
	return NodeWithMid(id, keyHash, y^y>>31^y>>62, weight)
}

// RankerClasses returns the number of weight classes a Ranker picks by (0: it does
// not). Test-only.
func RankerClasses(r *Ranker) int { return len(r.cls) }

// RankerKeyed reports whether a Ranker picks by the keyed selection. Test-only.
func RankerKeyed(r *Ranker) bool { return r.iw != nil }

// PickKeyed runs the keyed selection alone over at most 64 nodes (Pick's, and, with
// ranker, the Ranker's over the same nodes, which must all have a positive weight and
// distinct IDs): the winner's index and whether it was proven. Test-only.
func PickKeyed(keyHash uint64, nodes []Node, ranker bool) (int, bool) {
	if !ranker {
		return pickKeyed(premix(keyHash), nodes)
	}
	r, err := New(nodes)
	if err != nil || r.iw == nil {
		panic("PickKeyed: not a keyed Ranker")
	}
	return r.pickKeyed(premix(keyHash))
}

// lowPFixed returns 2^31·P(X·2^-31) for X < 2^31 in integers, rounded down (below
// 2^32): the keys from P a Ranker used before it took Pick's binary64 ones, kept as
// KeyBounds' integer reference so that the bound checks stand. Test-only.
func lowPFixed(x uint64) uint64 {
	y := x * x >> 32 // 2^31·x²/2
	z := x * y >> 32 // 2^31·x³/4
	return x + y + z + z*0xaaaaaaab>>33 + y*y>>31
}

// KeyBounds returns, for a mid value z, the bounds the keyed selection uses, each as a
// multiple of 2^-31 where scaled: lo1 = X (first order), loP and loPFixed (2^31·P of
// X·2^-31 in binary64 and in integers), and the upper bound H((X+1)·2^-31) unscaled. Test-only.
func KeyBounds(z uint64) (lo1, loP, loPFixed, hi float64) {
	x := lowX(z)
	hi = upH(float64(int64(x+1)) * 0x1p-31)
	return float64(x), lowP(float64(int64(x))), float64(lowPFixed(x)), hi
}

// KeyUpperB returns the first pass's upper bound B(x) = x + x²/(2(1-x)) of -ln(u) at
// x = (X+1)·2^-31 for a mid value z, computed as proven does (+Inf for x = 1). Test-only.
func KeyUpperB(z uint64) float64 {
	x := float64(int64(lowX(z)+1)) * 0x1p-31
	return x * (2 - x) / (2 * (1 - x))
}

// RankerKeyX returns, for the live node i of a keyed Ranker (see [RankerKeyed]) and
// keyHash, the upper bound of 1-u that Ranker.pickKeyed derives from the node's
// first-order packed key (NaN when its fixed-point inverse weight is 0), the index the
// packed key carries, and (X+1)·2^-31 computed from the node's mix. Test-only.
func RankerKeyX(r *Ranker, keyHash uint64, i int) (fromKey float64, idx int, exact float64) {
	kp := premix(keyHash)
	b, _ := minKeyFixed(kp, r.pre[i:i+1], r.iw[i:i+1], r.kd[i:i+1], newMixer())
	return r.keyX(b), int(b & keyIdx), float64(int64(lowX(mid(kp^r.pre[i]))+1)) * 0x1p-31
}

// NodeKeyX is RankerKeyX for Pick's first-order float keys: the upper bound of 1-u that
// Pick's first proof derives from a node's packed key, the index the key carries (0),
// and (X+1)·2^-31 from the node's mix. Test-only.
func NodeKeyX(keyHash uint64, n Node) (fromKey float64, idx int, exact float64) {
	kp := premix(keyHash)
	b, _ := minKey(kp, []Node{n}, newMixer())
	return keyNodeX(b, n.weight), int(b & keyIdx), float64(int64(lowX(mid(kp^n.pre))+1)) * 0x1p-31
}

// KeyedFirst returns the owner of the smallest first-order key of Pick's keyed
// selection over at most 64 nodes (the winner its first proof tries). Test-only.
func KeyedFirst(keyHash uint64, nodes []Node) int {
	b, _ := minKey(premix(keyHash), nodes, newMixer())
	return int(b & keyIdx)
}
