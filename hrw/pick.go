package hrw

import "math"

// Pick returns the index in nodes of the winner for keyHash (usually [KeyHash] of the
// session ID): the first node in the canonical order described in the package doc.
// It returns -1 when nodes is empty or every node has weight 0. Duplicate IDs collapse to
// their first occurrence (whose weight counts); the result never depends on the order of
// nodes beyond which duplicate comes first. The zero [Node] is skipped.
//
// With all weights equal it runs one loop of one mix (splitmix64 without its last
// xorshift, see the package doc) and one compare per node (with conditional moves and no
// branch per node up to 64 nodes, unrolled by four above), and finishes the mix and looks
// at IDs only when the top 31 bits tie. Otherwise it runs the weighted selection: up to
// 64 nodes a branch-free loop orders them by an ln-free lower bound of 1/score and proves
// its winner exact with one upper bound (weighted.go); above, or when that proof fails
// (a near-tie), nodes that the bound s <= w/(1-u) rules out are skipped, the rest are
// ordered by ln-free two-sided bounds and take ln only on near-ties. The result is
// identical to computing every score and sorting.
//
// Cost: O(n) in nodes, 0 allocs. With equal weights one mix, one weight compare and one
// integer compare per node. With varied weights, up to 64 nodes one mix, one division,
// one conversion and one product per node (a second pass with a short polynomial for
// about 13 % of the keys at 8 nodes, 2 % at 64); above, one mix, one conversion and a
// product per node, except that above 128 nodes, after the first 64, a node costs one
// mix and two integer compares (against a cap on the weights, raised by a factor 1.25
// at least when a heavier node comes: O(log(wmax/wmin)) times at most); O(log n) bound
// evaluations expected; then a scan of the nodes before the winner for its ID (the
// duplicate rule); only if the winner is a later copy of an ID first given with another
// weight is the selection redone with duplicates removed (O(n²) in the worst case).
// Safe for concurrent use.
func Pick(keyHash uint64, nodes []Node) int { return pick(keyHash, nodes, newMixer()) }

// pickWeighted is Pick after pick's equal-weight loop declined: the equal-weight loop
// for more than packedMax nodes, then the weighted selections. nodes is not empty.
func pickWeighted(kp uint64, nodes []Node) int {
	if len(nodes) > packedMax {
		if w0 := wbits(&nodes[0]); w0 != 0 && wbits(&nodes[len(nodes)-1]) == w0 {
			if i, ok := maxUnrolled(kp, nodes, w0); ok {
				return i
			}
		}
	}
	if len(nodes) <= packedMax {
		if i, ok := pickKeyed(kp, nodes); ok {
			return dedup(kp, nodes, nil, i)
		}
	}
	wc := 0.0 // above 2·packedMax nodes skipCap's first cap: the larger of the end weights
	if len(nodes) > 2*packedMax {
		wc = max(nodes[0].weight, nodes[len(nodes)-1].weight, MinWeight)
	}
	return dedup(kp, nodes, nil, pickGeneral(kp, nodes, nil, nil, wc))
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

// pickGeneral is the selection for any weights (0 included) over the eligible nodes
// (nil: all), treating later duplicates as distinct nodes. It skips every node whose
// score bound w/(1-u) lies below the leader's lower bound (weight 0 included) without
// calling eligible for it. The leader lives in local variables (registers). A [Ranker]
// passes its contiguous hashes pre and wmax = maxWeight(nodes): if wmax > 0, skipMax
// replaces skipBelow. Pick passes pre == nil and, above 2·packedMax nodes, a first cap
// wmax > 0 for skipCap, which then replaces skipBelow.
func pickGeneral(kp uint64, nodes []Node, eligible func(int) bool, pre []uint64, wmax float64) int {
	bi := -1
	var bm uint64
	var bid string
	var bw, blo, bhi, bs float64 // leader's weight, score bounds and score (0: unknown)
	for i := 0; ; i++ {
		m := uint64(0)
		if wmax > 0 && pre == nil {
			i, m, wmax = skipCap(kp, nodes, i, blo, wmax)
		} else if wmax > 0 {
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

// capFrom and capRise are skipCap's parameters: the nodes that skipBelow scans first,
// and the least factor by which the cap rises (measured: 64 and 1.25 over 128, 32 and
// 1.0625 at 512 and 1024 nodes with weights from 0.5 to 4).
const capFrom, capRise = 64, 1.25

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
	q := nodes[i:]
	for ; len(q) >= 4; q = q[4:] {
		if !(q[0].weight < k*float64(int64(^c.mid(kp^q[0].pre)>>33))) ||
			!(q[1].weight < k*float64(int64(^c.mid(kp^q[1].pre)>>33))) ||
			!(q[2].weight < k*float64(int64(^c.mid(kp^q[2].pre)>>33))) ||
			!(q[3].weight < k*float64(int64(^c.mid(kp^q[3].pre)>>33))) {
			break
		}
	}
	for i = len(nodes) - len(q); i < len(nodes); i++ {
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
	lim := limFor(wmax, lo)
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

// skipCap is skipBelow for Pick above 2·packedMax nodes: skipBelow itself over the
// first capFrom nodes, then skipMax's integer-only scan without a known largest weight.
// Instead it keeps a cap wc on the weights, which it raises when scanCap meets a node
// above it (to that weight, and by a factor capRise at least, so that a list in
// ascending weight order raises it O(log(wmax/wmin)) times). Every node the scan passes
// over has a weight <= wc and fails the test against wc, so it fails skipBelow's test:
// the result is skipBelow's. It returns the cap too.
//
// Each node that passes the cap's test but not its own costs a return from the scan
// (a mispredicted branch): with weights from 0.5 to 4 about 1.8 of them per candidate.
// Over the first nodes, where lo is low and most nodes are candidates, that costs more
// than the conversion and the product it saves: hence skipBelow there.
func skipCap(kp uint64, nodes []Node, i int, lo, wc float64) (int, uint64, float64) {
	if i < capFrom {
		if j, m := skipBelow(kp, nodes[:capFrom], i, lo, newMixer()); j < capFrom {
			return j, m, wc
		}
		i = capFrom
	}
	k := lo * (0x1p-31 / pruneMargin)
	lim := limFor(wc, lo)
	for ; ; i++ {
		var z uint64
		if i, z = scanCap(kp, nodes, i, math.Float64bits(wc), lim, newMixer()); i == len(nodes) {
			return i, 0, wc
		}
		w := nodes[i].weight
		if w > wc {
			wc = max(w, capRise*wc)
			lim = limFor(wc, lo)
		}
		if !(w < k*float64(int64(^z>>33))) {
			return i, last(z) >> 11, wc
		}
	}
}

// limFor returns the mid-value limit (low 33 bits clear) below which a node of weight w
// fails skipBelow's test against lo: with k = lo·2^-31/pruneMargin and d = w/k,
// slightly rounded up, z >= lim <=> ^z>>33 <= floor(d). lo == 0 (d = +Inf) gives 0:
// every node passes.
func limFor(w, lo float64) uint64 {
	k := lo * (0x1p-31 / pruneMargin)
	if d := w / k * (1 + 1e-12); d < 1<<31 {
		return (1<<31 - 1 - uint64(d)) << 33
	}
	return 0
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
// this finds nothing.) Before a long prefix (16 nodes or more) it first passes over
// four nodes at a time whose hashes differ from the winner's (otherPre: one loop test
// per four nodes; the plain scan took 16 % of Pick's time with varied weights at 512
// nodes).
func dedup(kp uint64, nodes []Node, eligible func(int) bool, bi int) int {
	from := 0
	if bi >= 16 {
		from = otherPre(nodes[:bi], nodes[bi].pre)
	}
	if bi > 0 && dupBefore(nodes, from, bi, eligible) {
		var buf [1]int
		if r, _ := topk(kp, nodes, eligible, 1, buf[:0], true); len(r) > 0 {
			return r[0]
		}
		return -1
	}
	return bi
}

// otherPre returns an index j such that no node before it has the premixed hash h,
// passing over four nodes per step while more than 12 are left.
func otherPre(nodes []Node, h uint64) int {
	q := nodes
	for len(q) > 12 && q[0].pre != h && q[1].pre != h && q[2].pre != h && q[3].pre != h {
		q = q[4:]
	}
	return len(nodes) - len(q)
}

// dupBefore reports whether a node at an index in [from, i) (eligible, if eligible !=
// nil) has the same ID as nodes[i]. Equal IDs have equal hashes, so the scan compares
// hashes first.
func dupBefore(nodes []Node, from, i int, eligible func(int) bool) bool {
	h, id := nodes[i].pre, nodes[i].id
	for j := from; j < i; j++ {
		if nodes[j].pre == h && nodes[j].id == id && (eligible == nil || eligible(j)) {
			return true
		}
	}
	return false
}
