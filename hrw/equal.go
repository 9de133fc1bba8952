package hrw

import "unsafe"

// The equal-weight selections: the loops of Pick and Ranker.Pick when all weights are
// equal, and the scans that TopK and Ranker's weighted selection share with them.

// packedMax is the largest node count for which the equal-weight selections use the
// branch-free loop. Above it the unrolled loop with one well-predicted branch per node
// wins.
const packedMax = 64

// pick is Pick (which inlines to a call of it with the constants of c, see mixer): up
// to packedMax nodes of one positive weight it runs the branch-free loop of maxPacked
// with one weight compare per node, and returns its winner unless the maximum was
// reached twice. Everything else (more nodes, varied or zero weights, a possible tie)
// goes on to pickWeighted. The loop is here rather than in a callee so that the usual
// path is one call with no spills (about 0.8 ns, 5 %, faster at 8 nodes).
//
//go:noinline
func pick(keyHash uint64, nodes []Node, c mixer) int {
	kp := premix(keyHash)
	nodes = nodes[:len(nodes):len(nodes)] // no cap to keep in a register (or to spill)
	if uint(len(nodes)-1) >= packedMax {  // empty, or more than packedMax nodes
		if len(nodes) == 0 {
			return -1
		}
		return pickWeighted(kp, nodes)
	}
	w0 := wbits(&nodes[0])
	bt, tv, bj := uint64(0), uint64(1), 0
	for j := 0; j < len(nodes); {
		n := &nodes[j]
		if wbits(n) != w0 {
			return pickWeighted(kp, nodes) // (varied weights leave at the first that differs)
		}
		t := c.mid(kp^n.pre) & c.hi
		j++ // bj is the index plus one, as in maxPacked
		if t == bt {
			tv = t
		}
		if t > bt {
			bj = j
		}
		bt = max(bt, t)
	}
	if tv == bt || w0 == 0 {
		return pickWeighted(kp, nodes)
	}
	return bj - 1
}

// maxPacked is pick's branch-free loop over contiguous premixed hashes (no
// weights): the index of the largest top 31 bits t of the mid values, hence of the
// largest m; ok=false: two nodes may tie. Per node one compare against the running
// maximum bt feeds three conditional moves (all on one flag, one micro-op each): the
// index on t > bt, the maximum, and tv = t on t == bt, so that at the end tv == bt
// exactly when the maximum was reached twice (tv starts at 1, which no t equals: a
// tie, about n·2^-31 of the keys). Not inlined: inside a larger function the
// compiler turns the maximum into a branch, which mispredicts, and the constants in c
// back into constants.
//
//go:noinline
func maxPacked(kp uint64, pre []uint64, c mixer) (int, bool) {
	bt, tv, bj := uint64(0), uint64(1), 0
	for j := 0; j < len(pre); {
		t := c.mid(kp^pre[j]) & c.hi
		j++ // bj is the index plus one: the increment serves both (one instruction fewer)
		if t == bt {
			tv = t
		}
		if t > bt {
			bj = j
		}
		bt = max(bt, t)
	}
	return bj - 1, tv != bt
}

// ahead reports whether a node (mid value z, ID id) comes before the best so far (bz,
// bid) in the equal-weight order: higher m, then the smaller ID.
func ahead(z uint64, id string, bz uint64, bid string) bool {
	m, bm := last(z)>>11, last(bz)>>11
	return m > bm || (m == bm && id < bid)
}

// maxUnrolled is pick's equal-weight loop for more than packedMax nodes: scanEqual skips the
// nodes whose mid value's top 31 bits stay below the best's, and only the few others
// (O(log n) expected) are compared exactly, by m and ID, so ties need no second pass.
func maxUnrolled(kp uint64, nodes []Node, w0 uint64) (int, bool) {
	bi, bz := -1, uint64(0)
	for i := 0; ; i++ {
		var z uint64
		if i, z = scanEqual(kp, nodes, i, w0, bz&^low33, newMixer()); i == len(nodes) {
			return bi, true
		}
		if wbits(&nodes[i]) != w0 {
			return 0, false
		}
		if bi < 0 || ahead(z, nodes[i].id, bz, nodes[bi].id) {
			bi, bz = i, z
		}
	}
}

// scanEqual returns the first index j >= i, and its mid value, of a node that has weight
// bits other than w0 or a mid value z >= lim (lim has its 33 low bits clear: the node's
// top 31 bits reach the best's), or len(nodes). Four nodes per step; a leaf, so that it
// keeps everything in registers.
//
//go:noinline
func scanEqual(kp uint64, nodes []Node, i int, w0, lim uint64, c mixer) (int, uint64) {
	q := nodes[i:]
	for ; len(q) >= 4; q = q[4:] {
		z0, z1, z2, z3 := c.mid(kp^q[0].pre), c.mid(kp^q[1].pre), c.mid(kp^q[2].pre), c.mid(kp^q[3].pre)
		if z0 >= lim || z1 >= lim || z2 >= lim || z3 >= lim || wbits(&q[0]) != w0 ||
			wbits(&q[1]) != w0 || wbits(&q[2]) != w0 || wbits(&q[3]) != w0 {
			break
		}
	}
	i = len(nodes) - len(q)
	for ; i < len(nodes); i++ {
		n := &nodes[i]
		if z := c.mid(kp ^ n.pre); z >= lim || wbits(n) != w0 {
			return i, z
		}
	}
	return i, 0
}

// scanPre is scanEqual over contiguous premixed hashes (no weights).
//
//go:noinline
func scanPre(kp uint64, pre []uint64, i int, lim uint64, c mixer) (int, uint64) {
	q := pre[i:]
	for ; len(q) >= 4; q = q[4:] {
		z0, z1, z2, z3 := c.mid(kp^q[0]), c.mid(kp^q[1]), c.mid(kp^q[2]), c.mid(kp^q[3])
		if z0 >= lim || z1 >= lim || z2 >= lim || z3 >= lim {
			break
		}
	}
	i = len(pre) - len(q)
	for ; i < len(pre); i++ {
		if z := c.mid(kp ^ pre[i]); z >= lim {
			return i, z
		}
	}
	return i, 0
}

// wbits is math.Float64bits(n.weight) loaded straight into an integer register (the
// compiler otherwise loads the float and moves it: two instructions per node).
func wbits(n *Node) uint64 { return *(*uint64)(unsafe.Pointer(&n.weight)) }

// scanCap returns the first index j >= i, and its mid value, of a node whose weight
// bits exceed wc or whose mid value z >= lim (lim as in scanEqual), or len(nodes).
// Weights are +0 or positive, so their bits order as their values do. Each node's two
// tests come before the next node's mix (scanEqual's form, four mixes first, spilled
// registers in the loop here, seen in the assembly, and ran about 6 % slower at 512).
//
//go:noinline
func scanCap(kp uint64, nodes []Node, i int, wc, lim uint64, c mixer) (int, uint64) {
	q := nodes[i:]
	for ; len(q) >= 4; q = q[4:] {
		if c.mid(kp^q[0].pre) >= lim || wbits(&q[0]) > wc || c.mid(kp^q[1].pre) >= lim || wbits(&q[1]) > wc ||
			c.mid(kp^q[2].pre) >= lim || wbits(&q[2]) > wc || c.mid(kp^q[3].pre) >= lim || wbits(&q[3]) > wc {
			break
		}
	}
	i = len(nodes) - len(q)
	for ; i < len(nodes); i++ {
		n := &nodes[i]
		if z := c.mid(kp ^ n.pre); z >= lim || wbits(n) > wc {
			return i, z
		}
	}
	return i, 0
}
