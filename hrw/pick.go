package hrw

import (
	"math"
	"unsafe"
)

// Pick returns the index in nodes of the winner for keyHash (usually [KeyHash] of the
// session ID): the first node in the canonical order described in the package doc.
// It returns -1 when nodes is empty or every node has weight 0. Duplicate IDs collapse to
// their first occurrence (whose weight counts); the result never depends on the order of
// nodes beyond which duplicate comes first. The zero [Node] is skipped.
//
// With all weights equal it runs one loop of one mix (splitmix64 without its last
// xorshift, see the package doc) and one compare per node (with conditional moves and no
// branch per node up to 64 nodes, unrolled by four above), and finishes the mix and looks
// at IDs only when the top 31 bits tie. Otherwise it runs the weighted selection: nodes
// that the bound s <= w/(1-u) rules out are skipped, the rest are ordered by ln-free
// two-sided bounds and take ln only on near-ties. The result is identical to computing
// every score and sorting.
//
// Cost: O(n) in nodes, 0 allocs. With equal weights one mix, one weight compare and one
// integer compare per node. With varied weights, plus an int-to-float conversion and a
// product per node, O(log n) bound evaluations expected, and a scan of the nodes before
// the winner for its ID (the duplicate rule); only if the winner is a later copy of an
// ID first given with another weight is the selection redone with duplicates removed
// (O(n²) in the worst case). Safe for concurrent use.
func Pick(keyHash uint64, nodes []Node) int {
	kp := premix(keyHash)
	if i, ok := pickEqual(kp, nodes); ok {
		return i
	}
	return dedup(kp, nodes, nil, pickGeneral(kp, nodes, nil, nil, 0))
}

// PickFunc is [Pick] over the nodes for which eligible(i) reports true, without building
// a new slice: it returns the same index as Pick would over the eligible subsequence
// (mapped back to an index into nodes), or -1 if there is none. Duplicates collapse to
// the first eligible occurrence. A nil eligible means all nodes are eligible.
// eligible is called at most once per node with a positive weight that could still win
// (plus, rarely, on the nodes before the winner that share its hash) and must not modify
// nodes.
//
// Cost: O(n) in nodes plus the calls of eligible, 0 allocs (eligible's own allocations
// aside). Safe for concurrent use if eligible is.
func PickFunc(keyHash uint64, nodes []Node, eligible func(i int) bool) int {
	if eligible == nil {
		return Pick(keyHash, nodes)
	}
	kp := premix(keyHash)
	return dedup(kp, nodes, eligible, pickGeneral(kp, nodes, eligible, nil, 0))
}

// packedMax is the largest node count for which the equal-weight selections use the
// branch-free loop. Above it the unrolled loop with one well-predicted branch per node
// wins.
const packedMax = 64

// pickEqual is Pick's equal-weight fast path over premixed key kp. ok=false means the
// weights are not all equal and positive, or (packed loop) two nodes may tie: the caller
// must use pickGeneral.
func pickEqual(kp uint64, nodes []Node) (int, bool) {
	if len(nodes) == 0 {
		return -1, true
	}
	w0 := math.Float64bits(nodes[0].weight)
	if w0 == 0 || math.Float64bits(nodes[len(nodes)-1].weight) != w0 {
		return 0, false // (the last node's weight: varied weights leave at once)
	}
	if len(nodes) > packedMax {
		return maxUnrolled(kp, nodes, w0)
	}
	return maxPackedNodes(kp, nodes, w0, newMixer())
}

// maxPackedNodes is pickEqual's branch-free loop for up to packedMax nodes. The packed
// value v is the node's mid value with its 33 low bits replaced by the index: the
// largest v has the largest top 31 bits, hence the largest m, and its index. s2 is the
// second largest v; if it shares the top 31 bits with the largest, ok=false and the
// caller decides exactly (about n·2^-31 of the keys). ok=false also when a weight
// differs from w0 (bits). c carries the constants (see mixer); not inlined, as maxPacked.
//
//go:noinline
func maxPackedNodes(kp uint64, nodes []Node, w0 uint64, c mixer) (int, bool) {
	var bv, s2 uint64
	for i := range nodes {
		n := &nodes[i]
		if wbits(n) != w0 {
			return 0, false
		}
		v := c.mid(kp^n.pre)&c.hi | uint64(i)
		s2 = max(s2, min(bv, v))
		bv = max(bv, v)
	}
	return int(bv & low33), bv^s2 > low33
}

// maxPacked is maxPackedNodes over contiguous premixed hashes (no weights), for up to
// packedMax of them; ok=false: two nodes may tie. Not inlined: inside a larger function
// the compiler turns the maximum into a branch, which mispredicts, and the constants in
// c back into constants.
//
//go:noinline
func maxPacked(kp uint64, pre []uint64, c mixer) (int, bool) {
	var bv, s2 uint64
	for i, h := range pre {
		v := c.mid(kp^h)&c.hi | uint64(i)
		s2 = max(s2, min(bv, v))
		bv = max(bv, v)
	}
	return int(bv & low33), bv^s2 > low33
}

// ahead reports whether a node (mid value z, ID id) comes before the best so far (bz,
// bid) in the equal-weight order: higher m, then the smaller ID.
func ahead(z uint64, id string, bz uint64, bid string) bool {
	m, bm := last(z)>>11, last(bz)>>11
	return m > bm || (m == bm && id < bid)
}

// maxUnrolled is pickEqual's loop for more than packedMax nodes: scanEqual skips the
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

// pickGeneral is the selection for any weights (0 included) over the eligible nodes
// (nil: all), treating later duplicates as distinct nodes. It skips every node whose
// score bound w/(1-u) lies below the leader's lower bound (weight 0 included) without
// calling eligible for it. The leader lives in local variables (registers). A [Ranker]
// passes its contiguous hashes pre and wmax = maxWeight(nodes): if wmax > 0, skipMax
// replaces skipBelow.
func pickGeneral(kp uint64, nodes []Node, eligible func(int) bool, pre []uint64, wmax float64) int {
	bi := -1
	var bm uint64
	var bid string
	var bw, blo, bhi, bs float64 // leader's weight, score bounds and score (0: unknown)
	for i := 0; ; i++ {
		m := uint64(0)
		if wmax > 0 {
			i, m = skipMax(kp, pre, nodes, i, blo, wmax)
		} else {
			i, m = skipBelow(kp, nodes, i, blo, newMixer())
		}
		if i == len(nodes) {
			return bi
		}
		n := &nodes[i]
		if n.weight == 0 || (eligible != nil && !eligible(i)) {
			continue
		}
		switch w := n.weight; {
		case bi < 0:
			blo, bhi, bs = bounds(w, m)
		case w == bw:
			if m < bm || (m == bm && n.id >= bid) {
				continue
			}
			blo, bhi, bs = bounds(w, m)
		default:
			lo, hi, s := bounds(w, m)
			if hi < blo {
				continue
			}
			if lo <= bhi { // the bounds overlap: compare the exact scores
				if bs == 0 {
					bs = score(bw, bm)
				}
				if s = score(w, m); s < bs || (s == bs && (m < bm || (m == bm && n.id >= bid))) {
					continue
				}
			}
			blo, bhi, bs = lo, hi, s
		}
		bi, bm, bw, bid = i, m, n.weight, n.id
	}
}

// skipBelow returns the first index j >= i (and its m) of a node whose score the bound
// s <= w/(1-u) does not rule out against lo, a lower bound of the score to beat (0: none
// is ruled out). It bounds 1-u from below by the top 31 bits of the mid value alone,
// 1-u > (2^31-1-z>>33)·2^-31 = (^z>>33)·2^-31, so a node costs a mid, one conversion,
// one product and one compare; the bound is looser than with m by a relative 2^-31/(1-u)
// at most, which only lets a few more nodes through to the exact comparison. A leaf,
// not inlined, so that everything stays in registers.
//
//go:noinline
func skipBelow(kp uint64, nodes []Node, i int, lo float64, c mixer) (int, uint64) {
	k := lo * (0x1p-31 / pruneMargin)
	for ; i < len(nodes); i++ {
		n := &nodes[i]
		if z := c.mid(kp ^ n.pre); !(n.weight < k*float64(int64(^z>>33))) {
			return i, last(z) >> 11
		}
	}
	return i, 0
}

// skipMax is skipBelow for a [Ranker], whose hashes pre are contiguous and whose largest
// weight is wmax: the equal-weight scan passes over the nodes whose mid value rules them
// out even with weight wmax (^z>>33 > d = wmax/k, slightly rounded up: one compare each,
// no conversion), and only the others get skipBelow's test with their own weight. Every
// node the scan passes over fails that test too, so the result is skipBelow's.
func skipMax(kp uint64, pre []uint64, nodes []Node, i int, lo, wmax float64) (int, uint64) {
	k := lo * (0x1p-31 / pruneMargin)
	lim := uint64(0) // lo == 0 (k == 0, d = +Inf): every node passes
	if d := wmax / k * (1 + 1e-12); d < 1<<31 {
		lim = (1<<31 - 1 - uint64(d)) << 33 // z >= lim <=> ^z>>33 <= floor(d)
	}
	for ; ; i++ {
		var z uint64
		if i, z = scanPre(kp, pre, i, lim, newMixer()); i == len(pre) {
			return i, 0
		}
		if !(nodes[i].weight < k*float64(int64(^z>>33))) {
			return i, last(z) >> 11
		}
	}
}

// maxWeight returns the largest weight in nodes if there are more than 2·packedMax of
// them, else 0: what a Ranker passes to pickGeneral (skipMax has paid off at 512 nodes,
// not at 64, where its passes' mispredicted branches outweigh the saved conversions).
func maxWeight(nodes []Node) float64 {
	w := 0.0
	if len(nodes) > 2*packedMax {
		for i := range nodes {
			if nodes[i].weight > w {
				w = nodes[i].weight
			}
		}
	}
	return w
}

// leader is the running winner of a selection with weights: its m, weight, ID and,
// computed on first need, ln-free bounds lo <= s <= hi of its score and the score itself.
type leader struct {
	m         uint64
	w         float64
	id        string
	lo, hi, s float64 // lo < 0: bounds not computed; s == 0: score not computed
}

func (l *leader) set(w float64, m uint64, id string) {
	l.m, l.w, l.id, l.lo, l.s = m, w, id, -1, 0
}

// lower returns the lower bound of the leader's score, computing the bounds if needed.
func (l *leader) lower() float64 {
	if l.lo < 0 {
		l.lo, l.hi, _ = bounds(l.w, l.m)
	}
	return l.lo
}

// beatenBy reports whether the node (w > 0, m, id) comes before the leader in the
// canonical order (ignoring input positions). Equal weights compare (m, ID); otherwise
// the bounds decide, and two logarithms only when they overlap. If the node wins it
// becomes the leader, keeping the bounds and score computed for it.
func (l *leader) beatenBy(w float64, m uint64, id string) bool {
	if w == l.w {
		if m > l.m || (m == l.m && id < l.id) {
			l.set(w, m, id)
			return true
		}
		return false
	}
	lo, hi, s := bounds(w, m)
	switch {
	case hi < l.lower():
		return false
	case lo > l.hi:
	default:
		if l.s == 0 {
			l.s = score(l.w, l.m)
		}
		if s = score(w, m); s < l.s || (s == l.s && (m < l.m || (m == l.m && id >= l.id))) {
			return false
		}
	}
	*l = leader{m: m, w: w, id: id, lo: lo, hi: hi, s: s}
	return true
}

// dedup applies the duplicate rule to bi, a winner found with later duplicates counted as
// distinct nodes: if an earlier eligible node has its ID, the selection is redone
// exactly. (With equal weights a later copy always loses to its first occurrence, so
// this finds nothing.)
func dedup(kp uint64, nodes []Node, eligible func(int) bool, bi int) int {
	if bi > 0 && dupBefore(nodes, bi, eligible) {
		var buf [1]int
		if r, _ := topk(kp, nodes, eligible, 1, buf[:0], true); len(r) > 0 {
			return r[0]
		}
		return -1
	}
	return bi
}

// dupBefore reports whether a node before index i (eligible, if eligible != nil) has the
// same ID as nodes[i]. Equal IDs have equal hashes, so the scan compares hashes first.
func dupBefore(nodes []Node, i int, eligible func(int) bool) bool {
	h, id := nodes[i].pre, nodes[i].id
	for j := range nodes[:i] {
		if nodes[j].pre == h && nodes[j].id == id && (eligible == nil || eligible(j)) {
			return true
		}
	}
	return false
}
