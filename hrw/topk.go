package hrw

import (
	"math"
	"slices"
)

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
	dst, varied := topk(premix(keyHash), nodes, eligible, k, dst[:0], false)
	for j, i := range dst {
		// With all weights equal a later copy of an ID ranks right after its first
		// occurrence, so it can only be in the result together with it: comparing the
		// results with each other is enough. Otherwise scan everything before it.
		if (!varied && dupIn(nodes, dst[:j], i)) || (varied && dupBefore(nodes, 0, i, eligible)) {
			dst, _ = topk(premix(keyHash), nodes, eligible, k, dst[:0], true)
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
func topk(kp uint64, nodes []Node, eligible func(int) bool, k int, dst []int, exact bool) ([]int, bool) {
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
				i, _ = skipBelow(kp, nodes, i, thr.s, newMixer())
			} else {
				i, _ = scanEqual(kp, nodes, i, math.Float64bits(thr.w), thr.m<<11&^low33, newMixer())
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
		c := keyOf(kp, n, i)
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
				if om := finish(kp^on.pre) >> 11; om != c.m {
					if om > c.m {
						break
					}
					j--
					continue
				}
			}
			o := keyOf(kp, on, dst[j-1])
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
			thr = keyOf(kp, &nodes[last], last)
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
		if nodes[j].pre == nodes[i].pre && nodes[j].id == nodes[i].id {
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
	kp := premix(keyHash)
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
		keys = append(keys, keyOf(kp, n, i))
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

// firstEligible reports whether nodes[i] is the first eligible occurrence of its ID.
func firstEligible(nodes []Node, i int, eligible func(int) bool) bool {
	return !dupBefore(nodes, 0, i, eligible)
}
