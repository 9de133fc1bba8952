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
