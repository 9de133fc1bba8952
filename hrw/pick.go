package hrw

import "math"

// Pick returns the index in nodes of the winner for keyHash (usually [KeyHash] of the
// session ID): the first node in the canonical order described in the package doc.
// It returns -1 when nodes is empty or every node has weight 0. Duplicate IDs collapse to
// their first occurrence (whose weight counts); the result never depends on the order of
// nodes beyond which duplicate comes first. The zero [Node] is skipped.
//
// With all weights equal it runs one loop of one mix and one compare per node (with
// conditional moves and no branch per node up to 64 nodes, unrolled by four above) and
// looks at IDs only on an exact 53-bit tie. Otherwise it runs the weighted selection:
// nodes that the bound s <= w/(1-u) rules out are skipped, the rest are ordered by
// ln-free two-sided bounds and take ln only on near-ties. The result is identical to
// computing every score and sorting.
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
	return dedup(kp, nodes, nil, pickGeneral(kp, nodes, nil))
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
	return dedup(kp, nodes, eligible, pickGeneral(kp, nodes, eligible))
}

// packedMax is the largest node count for which the equal-weight selections use the
// branch-free loop (it packs the index into the 11 low bits below m, so it must stay
// below 2048). Above it the unrolled loop with one well-predicted branch per node wins.
const packedMax = 64

// pickEqual is Pick's equal-weight fast path over premixed key kp. ok=false means the
// weights are not all equal and positive, or (packed loop) two nodes may tie on m: the
// caller must use pickGeneral.
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
	return maxPackedNodes(kp, nodes, w0)
}

// maxPackedNodes is pickEqual's branch-free loop for up to packedMax nodes. The packed
// value v is the mix with its 11 low bits replaced by the index: max(v) is the largest m
// and its index. t = min over nodes of v ^ (running max) is < 2^11 iff some node's m
// equalled the running maximum's, the only way two nodes can tie on the final m. d
// collects the bits in which a weight differs from the first one. Not inlined, as
// maxPacked.
//
//go:noinline
func maxPackedNodes(kp uint64, nodes []Node, w0 uint64) (int, bool) {
	var bv, d uint64
	t := ^uint64(0)
	for i := range nodes {
		n := &nodes[i]
		d |= math.Float64bits(n.weight) ^ w0
		v := finish(kp^n.pre)&^0x7ff | uint64(i)
		t = min(t, v^bv)
		bv = max(bv, v)
	}
	return int(bv & 0x7ff), d == 0 && t >= 0x800
}

// maxPacked is maxPackedNodes over contiguous premixed hashes (no weights), for up to
// packedMax of them; ok=false: two nodes may tie on m. Not inlined: inside a larger
// function the compiler turns the maximum into a branch, which mispredicts.
//
//go:noinline
func maxPacked(kp uint64, pre []uint64) (int, bool) {
	var bv uint64
	t := ^uint64(0)
	for i, h := range pre {
		v := finish(kp^h)&^0x7ff | uint64(i)
		t = min(t, v^bv)
		bv = max(bv, v)
	}
	return int(bv & 0x7ff), t >= 0x800
}

// maxUnrolled is pickEqual's loop for more than packedMax nodes, four nodes per step.
// A node is looked at only if its mix reaches lim (the best's m in the top 53 bits):
// then (m, ID) decide exactly, so ties need no second pass.
func maxUnrolled(kp uint64, nodes []Node, w0 uint64) (int, bool) {
	bi, bx := 0, finish(kp^nodes[0].pre)
	lim := bx &^ 0x7ff
	i := 1
	for ; i+4 <= len(nodes); i += 4 {
		q := nodes[i : i+4 : i+4]
		if math.Float64bits(q[0].weight) != w0 || math.Float64bits(q[1].weight) != w0 ||
			math.Float64bits(q[2].weight) != w0 || math.Float64bits(q[3].weight) != w0 {
			return 0, false
		}
		x0, x1, x2, x3 := finish(kp^q[0].pre), finish(kp^q[1].pre), finish(kp^q[2].pre), finish(kp^q[3].pre)
		if x0 >= lim || x1 >= lim || x2 >= lim || x3 >= lim {
			for j, x := range [4]uint64{x0, x1, x2, x3} {
				if x >= lim && (x>>11 != bx>>11 || q[j].id < nodes[bi].id) {
					bi, bx, lim = i+j, x, x&^0x7ff
				}
			}
		}
	}
	for ; i < len(nodes); i++ {
		n := &nodes[i]
		if math.Float64bits(n.weight) != w0 {
			return 0, false
		}
		if x := finish(kp ^ n.pre); x >= lim && (x>>11 != bx>>11 || n.id < nodes[bi].id) {
			bi, bx, lim = i, x, x&^0x7ff
		}
	}
	return bi, true
}

// pickGeneral is the selection for any weights (0 included) over the eligible nodes
// (nil: all), treating later duplicates as distinct nodes. It skips every node whose
// score bound w/(1-u) lies below the leader's lower bound (weight 0 included) without
// calling eligible for it. The leader lives in local variables (registers).
func pickGeneral(kp uint64, nodes []Node, eligible func(int) bool) int {
	bi := -1
	var bm uint64
	var bid string
	var bw, blo, bhi, bs float64 // leader's weight, score bounds and score (0: unknown)
	c := 0.0                     // pruneScale(blo): a node (w, m) with w < c·(2^53-m) cannot win
	for i := 0; ; i++ {
		m := uint64(0)
		if i, m = skipBelow(kp, nodes, i, c); i == len(nodes) {
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
		c = pruneScale(blo)
	}
}

// skipBelow returns the first index j >= i (and its m) of a node that the bound
// s <= w/(1-u) does not rule out against c = pruneScale(lower bound of the leader's
// score), or len(nodes). A leaf loop, so that it keeps everything in registers.
func skipBelow(kp uint64, nodes []Node, i int, c float64) (int, uint64) {
	for ; i < len(nodes); i++ {
		n := &nodes[i]
		if m := finish(kp^n.pre) >> 11; !below(n.weight, m, c) {
			return i, m
		}
	}
	return i, 0
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
