package affinity

// pickEqual is hrw.Pick over candidates of one weight, computed in place (the nodes are
// not copied): the candidate with the largest m = hrw.Mix(kh, hash)>>11, which for equal
// weights is hrw's winner unless two candidates share it (then the IDs decide). ok=false
// sends the caller to hrw.Pick: the weights differ (a zero Backend, weight 0, included)
// or two candidates may tie (duplicate IDs included).
//
// It runs hrw's own equal-weight loops over the candidates' hashes, which hrw.Pick runs
// over its nodes (see hrw/equal.go): hrw.Mix is splitmix64(kh ^ hash), whose first
// xorshift is linear over XOR (premixed once for the key, once per candidate) and whose
// last, z ^ z>>31, leaves the top 31 bits of z unchanged, so the loops compare those bits
// of the unfinished mix z and finish it only for the candidates that reach the best's
// top bits. Up to pickSmall candidates a branch-free loop (ok=false when the maximum
// is reached twice, about n·2^-31 of the keys); beyond it a scan four candidates at a
// time that stops only at a candidate reaching the best's top bits (O(log n) expected),
// compared exactly by m (ok=false on equal m). Per candidate one mix, one integer compare
// of the weight's bits and one compare; 0 allocs.
func pickEqual(kh uint64, cands []Backend) (int, bool) {
	w0 := cands[0].wbits
	if w0 == 0 {
		return 0, false
	}
	kp := premix(kh)
	if len(cands) <= pickSmall {
		return maxSmall(kp, cands, w0, newMixer())
	}
	return maxLarge(kp, cands, w0)
}

// pickSmall is the largest candidate count for the branch-free loop (hrw's packedMax):
// beyond it the scan with one well-predicted branch per four candidates is faster.
const pickSmall = 64

// mixer carries splitmix64's two multipliers and the mask of a mid value's top 31 bits as
// values: the loops that take one as an argument (and are not inlined) keep them in
// registers instead of rematerializing each 64-bit constant per candidate.
type mixer struct{ k1, k2, hi uint64 }

func newMixer() mixer { return mixer{0xbf58476d1ce4e5b9, 0x94d049bb133111eb, ^uint64(low33)} }

// low33 masks the bits of a mid value below its top 31.
const low33 = 1<<33 - 1

// premix is splitmix64's first xorshift. It is linear over XOR: premix(kh ^ h) =
// premix(kh) ^ premix(h), so a selection premixes the key hash once and reads each
// candidate's premixed node hash (Backend.pre). A bijection (0 to 0): equal premixed
// hashes are equal node hashes.
func premix(x uint64) uint64 { return x ^ x>>30 }

// unpremix inverts premix: if y = x ^ x>>30 then x = y ^ y>>30 ^ y>>60.
func unpremix(y uint64) uint64 { return y ^ y>>30 ^ y>>60 }

// mid is splitmix64 after its first xorshift and before its last: hrw.Mix(kh, h) =
// z ^ z>>31 with z = mid(premix(kh) ^ premix(h)).
func (c mixer) mid(x uint64) uint64 {
	x *= c.k1
	x ^= x >> 27
	return x * c.k2
}

// maxSmall is pickEqual's branch-free loop: per candidate one compare of its top 31 bits
// t against the running maximum bt feeds three conditional moves (the index on t > bt,
// the maximum, and tv = t on t == bt, so that tv == bt at the end exactly when the
// maximum was reached twice; tv starts at 1, which no t equals).
//
//go:noinline
func maxSmall(kp uint64, cands []Backend, w0 uint64, c mixer) (int, bool) {
	bt, tv, bi := uint64(0), uint64(1), 0
	for i := range cands {
		b := &cands[i]
		if b.wbits != w0 {
			return 0, false
		}
		t := c.mid(kp^b.pre) & c.hi
		if t == bt {
			tv = t
		}
		if t > bt {
			bi = i
		}
		bt = max(bt, t)
	}
	return bi, tv != bt
}

// maxLarge is pickEqual beyond pickSmall candidates: scanLarge passes over the candidates
// whose top 31 bits stay below the best's, and the few others are compared by m.
func maxLarge(kp uint64, cands []Backend, w0 uint64) (int, bool) {
	bi, bm := -1, uint64(0)
	lim := uint64(0)
	for i := 0; ; i++ {
		var z uint64
		if i, z = scanLarge(kp, cands, i, w0, lim, newMixer()); i == len(cands) {
			return bi, true
		}
		if cands[i].wbits != w0 {
			return 0, false
		}
		switch m := (z ^ z>>31) >> 11; {
		case bi >= 0 && m == bm: // a tie (a duplicate ID, say): the IDs decide
			return 0, false
		case bi < 0 || m > bm:
			bi, bm, lim = i, m, z&^low33
		}
	}
}

// scanLarge returns the first index j >= i, and its mid value, of a candidate whose weight
// is not w0 or whose mid value z >= lim (lim has its 33 low bits clear: the candidate's
// top 31 bits reach the best's), or len(cands). Four candidates per step; a leaf, so that
// it keeps everything in registers.
//
//go:noinline
func scanLarge(kp uint64, cands []Backend, i int, w0, lim uint64, c mixer) (int, uint64) {
	q := cands[i:]
	for ; len(q) >= 4; q = q[4:] {
		z0, z1, z2, z3 := c.mid(kp^q[0].pre), c.mid(kp^q[1].pre), c.mid(kp^q[2].pre), c.mid(kp^q[3].pre)
		if z0 >= lim || z1 >= lim || z2 >= lim || z3 >= lim || q[0].wbits != w0 ||
			q[1].wbits != w0 || q[2].wbits != w0 || q[3].wbits != w0 {
			break
		}
	}
	i = len(cands) - len(q)
	for ; i < len(cands); i++ {
		if z := c.mid(kp ^ cands[i].pre); z >= lim || cands[i].wbits != w0 {
			return i, z
		}
	}
	return i, 0
}
