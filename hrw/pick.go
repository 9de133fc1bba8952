package hrw

import "slices"

// Pick returns the index in nodes of the winner for keyHash (usually [KeyHash] of the
// session ID): the first node in the canonical order described in the package doc.
// It returns -1 when nodes is empty or every node has weight 0. Duplicate IDs collapse to
// their first occurrence (whose weight counts); the result never depends on the order of
// nodes beyond which duplicate comes first. The zero [Node] is skipped.
//
// Equal weights take a fast path that keeps a branch-free maximum of the 53-bit mixed
// values and looks at IDs only on an exact tie. Mixed weights skip the nodes that the
// bound s <= w/(1-u) rules out, order the rest by ln-free two-sided bounds and take ln
// only on near-ties. The result is identical to computing every score and sorting.
//
// Cost: O(n) in nodes: one multiply-xorshift mix and one compare per node; when the
// weights are not all equal, plus a scan of the nodes before the winner (one compare
// each) to apply the duplicate rule. Only if that scan finds the winner to be a later
// copy of an ID first given with another weight is the selection redone with duplicates
// removed (a rare slow path: a duplicate scan for each node that reaches the top spot,
// O(n²) in the worst case). 0 allocs. Safe for concurrent use.
func Pick(keyHash uint64, nodes []Node) int {
	bi, varied := pickCore(keyHash, nodes)
	// With all weights equal a later copy of an ID ties with its first occurrence and
	// loses on index, so only varied weights need the duplicate scan.
	if varied && bi > 0 && dupBefore(nodes, bi, nil) {
		return pickExact(keyHash, nodes, nil)
	}
	return bi
}

// pickCore is Pick without the duplicate rule (a later copy of an ID counts as a
// distinct node). It also reports whether the weights varied (two different positive
// weights, or a weight 0). The scans run in leaf functions so that their loops keep
// everything in registers; pickCore itself only handles the rare nodes they stop at.
func pickCore(kh uint64, nodes []Node) (int, bool) {
	bi := firstLive(nodes)
	if bi < 0 {
		return -1, false
	}
	varied := bi > 0
	bn := &nodes[bi]
	bm := splitmix64(kh^bn.hash) >> 11
	bw := bn.weight
	// Once weights differ (mixed): bounds blo <= s <= bhi of the best's score, and the
	// score itself (bs) once an exact comparison needed it (0 before).
	var blo, bhi, bs float64
	mixed := false
	for i := bi + 1; i < len(nodes); i++ {
		var m uint64
		if !mixed {
			// A stretch of nodes of the best's weight: branch-free running maximum of m;
			// exact (m, ID) comparisons only if some m equalled the running maximum.
			e, j, jm, tie := maxEqual(kh, nodes[i:], bw, bm)
			if tie {
				j, jm = tieBreak(kh, nodes[i:i+e], bm, bn.id)
			}
			if j >= 0 {
				bi, bn, bm = i+j, &nodes[i+j], jm
			}
			if i += e; i >= len(nodes) {
				break
			}
			m = splitmix64(kh^nodes[i].hash) >> 11 // a node of another weight
		} else if i, m = scanMixed(kh, nodes, i, blo); i >= len(nodes) {
			break
		}
		n := &nodes[i]
		if n.weight == bw {
			if m > bm || (m == bm && n.id < bn.id) {
				bi, bn, bm = i, n, m
				blo, bhi, bs = bounds(bw, bm)
			}
			continue
		}
		varied = true
		if n.weight == 0 {
			continue
		}
		if !mixed {
			mixed = true
			blo, bhi, bs = bounds(bw, bm)
		}
		lo, hi, s := bounds(n.weight, m)
		switch {
		case hi < blo: // provably below: no ln needed
			continue
		case lo > bhi: // provably above
		default: // the bounds overlap: compare the exact scores
			if bs == 0 {
				bs = score(bw, bm)
			}
			s = score(n.weight, m)
			if s < bs || (s == bs && (m < bm || (m == bm && n.id >= bn.id))) {
				continue
			}
		}
		bi, bn, bm, bw, blo, bhi, bs = i, n, m, n.weight, lo, hi, s
	}
	return bi, varied
}

// maxEqual scans nodes from the start while their weight is w and returns the end of
// that stretch, the index and m of its first node with the largest m above bm (index -1
// if no m exceeds bm), and whether some m equalled the running maximum (then the caller
// must break the tie by ID with tieBreak). The maximum is kept with conditional moves:
// no mispredicted branch per new maximum.
func maxEqual(kh uint64, nodes []Node, w float64, bm uint64) (end, j int, m uint64, tie bool) {
	j = -1
	var t uint64 // 1 once some x == bm; branch-free: x, bm < 2^53, so x^bm-1 has bit 63 set iff x == bm
	for k, n := range nodes {
		if n.weight != w {
			return k, j, bm, t != 0
		}
		x := splitmix64(kh^n.hash) >> 11
		t |= ((x ^ bm) - 1) >> 63
		if x > bm {
			bm, j = x, k
		}
	}
	return len(nodes), j, bm, t != 0
}

// tieBreak is maxEqual's exact version: the index and m of the first node in the
// canonical order (m, then ID) that beats (bm, bid), or -1.
func tieBreak(kh uint64, nodes []Node, bm uint64, bid string) (int, uint64) {
	j := -1
	for k := range nodes {
		n := &nodes[k]
		if m := splitmix64(kh^n.hash) >> 11; m > bm || (m == bm && n.id < bid) {
			j, bm, bid = k, m, n.id
		}
	}
	return j, bm
}

// firstLive returns the index of the first node with a positive weight, or -1.
func firstLive(nodes []Node) int {
	for i := range nodes {
		if nodes[i].weight != 0 {
			return i
		}
	}
	return -1
}

// scanEqual returns the first index j >= i (and its m) of a node that is not certain
// to lose to the best (weight bw > 0, mixed value bm) when every node seen so far has
// weight bw: a node with another weight (0 included, so that the caller notices it), or
// one with weight bw and m >= bm. It returns len(nodes) if there is none.
//
// It tests m >= bm as mix >= bm<<11, which saves a shift per node.
func scanEqual(kh uint64, nodes []Node, i int, bw float64, bm uint64) (int, uint64) {
	lim := bm << 11
	for j, n := range nodes[i:] {
		if x := splitmix64(kh ^ n.hash); x >= lim || n.weight != bw {
			return i + j, x >> 11
		}
	}
	return len(nodes), 0
}

// scanMixed returns the first index j >= i (and its m) of a node that the bound
// s <= w/(1-u) cannot place below blo, a lower bound of the best's score, or len(nodes)
// if there is none. Nodes of weight 0 are always skipped (0 < blo·(1-u)), and so are
// most nodes of the best's own weight with m < bm; those that stop the scan are compared
// exactly by the caller.
func scanMixed(kh uint64, nodes []Node, i int, blo float64) (int, uint64) {
	c := pruneScale(blo)
	for j, n := range nodes[i:] {
		if m := splitmix64(kh^n.hash) >> 11; !below(n.weight, m, c) {
			return i + j, m
		}
	}
	return len(nodes), 0
}

// PickFunc is [Pick] over the nodes for which eligible(i) reports true, without building
// a new slice: it returns the same index as Pick would over the eligible subsequence
// (mapped back to an index into nodes), or -1 if there is none. Duplicates collapse to
// the first eligible occurrence. A nil eligible means all nodes are eligible.
// eligible is called once per node (plus, rarely, on the nodes before the winner that
// share its hash) and must not modify nodes.
//
// Cost: O(n) in nodes plus n calls of eligible, 0 allocs (eligible's own allocations
// aside); the rare duplicate slow path of [Pick] calls eligible again. Safe for
// concurrent use if eligible is.
func PickFunc(keyHash uint64, nodes []Node, eligible func(i int) bool) int {
	if eligible == nil {
		return Pick(keyHash, nodes)
	}
	bi := -1
	var bn *Node
	var bm uint64
	bw, bs := -1.0, 0.0
	w0, seen, varied := 0.0, false, false
	for i := range nodes {
		n := &nodes[i]
		if !eligible(i) {
			continue
		}
		if !seen {
			w0, seen = n.weight, true
		} else if n.weight != w0 {
			varied = true
		}
		if n.weight == 0 {
			continue
		}
		m := splitmix64(keyHash^n.hash) >> 11
		if n.weight == bw {
			if m < bm || (m == bm && n.id >= bn.id) {
				continue
			}
			bi, bn, bm, bs = i, n, m, 0
			continue
		}
		if bn == nil {
			bi, bn, bm, bw, bs = i, n, m, n.weight, 0
			continue
		}
		win, s, nbs := weighed(n.weight, m, n.id, bn, bm, bs)
		if win {
			bi, bn, bm, bw, bs = i, n, m, n.weight, s
		} else {
			bs = nbs
		}
	}
	if varied && bi > 0 && dupBefore(nodes, bi, eligible) {
		return pickExact(keyHash, nodes, eligible)
	}
	return bi
}

// weighed compares a candidate (w, m, id) whose weight differs from the current best's
// (b, bm, score bs or 0 if not computed yet). It returns whether the candidate wins, its
// score if computed, and the best's score.
func weighed(w float64, m uint64, id string, b *Node, bm uint64, bs float64) (win bool, s, bsOut float64) {
	if bs == 0 {
		bs = score(b.weight, bm)
	}
	if loses(w, m, bs) {
		return false, 0, bs
	}
	s = score(w, m)
	if s != bs {
		return s > bs, s, bs
	}
	if m != bm {
		return m > bm, s, bs
	}
	return id < b.id, s, bs
}

// dupBefore reports whether a node before index i (eligible, if eligible != nil) has the
// same ID as nodes[i]. Equal IDs have equal hashes, so the scan compares hashes first.
func dupBefore(nodes []Node, i int, eligible func(int) bool) bool {
	h, id := nodes[i].hash, nodes[i].id
	for off := 0; ; {
		j := hashIndex(nodes[off:i], h)
		if j < 0 {
			return false
		}
		j += off
		if nodes[j].id == id && (eligible == nil || eligible(j)) {
			return true
		}
		off = j + 1
	}
}

// hashIndex returns the index of the first node with hash h, or -1.
func hashIndex(nodes []Node, h uint64) int {
	for j := range nodes {
		if nodes[j].hash == h {
			return j
		}
	}
	return -1
}

// firstEligible reports whether nodes[i] is the first eligible occurrence of its ID.
func firstEligible(nodes []Node, i int, eligible func(int) bool) bool {
	return !dupBefore(nodes, i, eligible)
}

// pickExact is the slow, duplicate-aware path taken when the winner of the fast pass is
// a later duplicate of an earlier node (which had a different weight).
func pickExact(keyHash uint64, nodes []Node, eligible func(int) bool) int {
	var buf [1]int
	r, _ := topk(keyHash, nodes, eligible, 1, buf[:0], true)
	if len(r) == 0 {
		return -1
	}
	return r[0]
}

// TopK appends to dst[:0] the indices of the first k nodes of the canonical order, best
// first, and returns the extended slice: TopK(dst, h, nodes, 1) holds [Pick](h, nodes)
// when that is not -1, and TopK(dst, h, nodes, len(nodes)) equals [Rank](h, nodes).
// Duplicates collapse to their first occurrence and nodes with weight 0 are omitted, so
// the result may hold fewer than k indices. k <= 0 returns dst[:0].
//
// Cost: O(n) in nodes plus O(k) per insertion into the running top k (expected
// O(k·log(n/k)) insertions), plus, when the weights are not all equal, a duplicate scan
// of the nodes before each result; 0 allocs if cap(dst) >= k. Safe for concurrent use.
func TopK(dst []int, keyHash uint64, nodes []Node, k int) []int {
	return TopKFunc(dst, keyHash, nodes, k, nil)
}

// TopKFunc is [TopK] over the nodes for which eligible(i) reports true (nil: all), with
// the semantics of [PickFunc]. eligible must not modify nodes. Cost as TopK plus the
// calls of eligible (at least one per node; more when a duplicate forces a recomputation);
// 0 allocs if cap(dst) >= k. Safe for concurrent use if eligible is.
func TopKFunc(dst []int, keyHash uint64, nodes []Node, k int, eligible func(i int) bool) []int {
	dst, varied := topk(keyHash, nodes, eligible, k, dst[:0], false)
	for j, i := range dst {
		// With all weights equal a later copy of an ID ranks right after its first
		// occurrence, so it can only be in the result together with it: comparing the
		// results with each other is enough. Otherwise scan everything before it.
		if (!varied && dupIn(nodes, dst[:j], i)) || (varied && dupBefore(nodes, i, eligible)) {
			dst, _ = topk(keyHash, nodes, eligible, k, dst[:0], true)
			return dst
		}
	}
	return dst
}

// topk keeps the running best k in dst (best first). With exact set, a node enters only
// if it is the first eligible occurrence of its ID; without it, duplicates are treated as
// distinct nodes (the caller checks the result and retries exactly if needed: if no
// result is a later duplicate, the result equals the deduplicated one). It also reports
// whether the weights of the eligible nodes varied (two values, 0 included).
func topk(kh uint64, nodes []Node, eligible func(int) bool, k int, dst []int, exact bool) ([]int, bool) {
	if k <= 0 {
		return dst, false
	}
	w0, seen, varied := 0.0, false, false
	var thr key    // the k-th entry's key once dst is full
	mixed := false // thr.s is kept up to date (weights differ)
	for i := 0; i < len(nodes); i++ {
		if len(dst) == k && eligible == nil {
			// Skip the nodes that cannot enter in a tight loop.
			if mixed {
				i, _ = scanMixed(kh, nodes, i, thr.s)
			} else {
				i, _ = scanEqual(kh, nodes, i, thr.w, thr.m)
			}
			if i >= len(nodes) {
				break
			}
		}
		n := &nodes[i]
		if eligible != nil && !eligible(i) {
			continue
		}
		if !seen {
			w0, seen = n.weight, true
		} else if n.weight != w0 {
			varied = true
		}
		if n.weight == 0 {
			continue
		}
		c := keyOf(kh, n, i)
		if len(dst) == k {
			if c.w != thr.w {
				mixed = true
			}
			if !outranks(&c, &thr) {
				continue
			}
		}
		if exact && !firstEligible(nodes, i, eligible) {
			continue
		}
		// Insert c at its position, dropping the k-th entry if full.
		if len(dst) == k {
			dst = dst[:k-1]
		}
		j := len(dst)
		for j > 0 {
			on := &nodes[dst[j-1]]
			if on.weight == c.w { // the common case: compare m, look further only on a tie
				if om := splitmix64(kh^on.hash) >> 11; om != c.m {
					if om > c.m {
						break
					}
					j--
					continue
				}
			}
			o := keyOf(kh, on, dst[j-1])
			if !before(&c, &o) {
				break
			}
			j--
		}
		dst = append(dst, 0)
		copy(dst[j+1:], dst[j:])
		dst[j] = i
		if len(dst) == k {
			last := dst[k-1]
			thr = keyOf(kh, &nodes[last], last)
			if mixed {
				thr.s = score(thr.w, thr.m)
			}
		}
	}
	return dst, varied
}

// dupIn reports whether one of the nodes at the indices idx has the ID of nodes[i].
func dupIn(nodes []Node, idx []int, i int) bool {
	for _, j := range idx {
		if nodes[j].hash == nodes[i].hash && nodes[j].id == nodes[i].id {
			return true
		}
	}
	return false
}

// Rank returns the indices of all nodes in the canonical order, best first: entry 0 is
// [Pick]'s winner, entry 1 the runner-up every replica falls back to, and so on.
// Duplicates collapse to their first occurrence; nodes with weight 0 are omitted (they
// never win, so they have no rank). It returns an empty, non-nil slice when no node
// has a positive weight.
//
// Cost: O(n log n) in nodes, n ln evaluations when weights differ (none when equal);
// allocates the result plus O(n) scratch. Safe for concurrent use.
func Rank(keyHash uint64, nodes []Node) []int {
	keys := make([]key, 0, len(nodes))
	seen := make(map[string]struct{}, len(nodes))
	uniform := true
	for i := range nodes {
		n := &nodes[i]
		if _, dup := seen[n.id]; dup {
			continue
		}
		seen[n.id] = struct{}{}
		if n.weight == 0 {
			continue
		}
		if len(keys) > 0 && n.weight != keys[0].w {
			uniform = false
		}
		keys = append(keys, keyOf(keyHash, n, i))
	}
	sortKeys(keys, uniform)
	out := make([]int, len(keys))
	for j := range keys {
		out[j] = keys[j].i
	}
	return out
}

// sortKeys sorts keys into the canonical order. Scores are computed up front unless all
// weights are equal (then only m, ID and index are compared).
func sortKeys(keys []key, uniform bool) {
	if !uniform {
		for j := range keys {
			keys[j].s = score(keys[j].w, keys[j].m)
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		switch {
		case before(&a, &b):
			return -1
		case before(&b, &a):
			return 1
		}
		return 0
	})
}

// outranks reports whether c comes before thr, the last entry of a full top-k list, in
// the canonical order, trying the cheap tests first: equal weights compare m; mixed
// weights try the ln-free bound of [loses] before the exact order. It fills in thr.s on
// first need.
func outranks(c, thr *key) bool {
	if c.w == thr.w {
		if c.m < thr.m {
			return false
		}
	} else {
		if thr.s == 0 {
			thr.s = score(thr.w, thr.m)
		}
		if loses(c.w, c.m, thr.s) {
			return false
		}
	}
	return before(c, thr)
}
