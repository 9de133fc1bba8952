package hrw

import (
	"fmt"
	"math"
)

// Ranker is an immutable, validated and deduplicated node set, prepared once for many
// selections: the snapshot a gateway swaps atomically when its backend list changes.
// It checks weights and collapses duplicates once, here, so that its selections need no
// duplicate scan, and it keeps the premixed node hashes in one contiguous slice
// (structure of arrays, as github.com/dgryski/go-rendezvous does) for the equal-weight
// loop; a few distinct weights are grouped into weight classes with contiguous hashes,
// other mixed weights take the weighted selection of [Pick].
//
// A Ranker is safe for concurrent use by any number of goroutines. Its results are
// identical to [Pick], [Rank] and [TopK] over the nodes given to [New]. The zero Ranker
// is an empty set (Pick reports false); a nil *Ranker is not usable.
type Ranker struct {
	all     []Node    // deduplicated, in input order (what Nodes returns)
	live    []Node    // the nodes of all with weight > 0
	pre     []uint64  // live[i].pre, contiguous
	iw      []uint64  // 64·floor(sc/live[i].weight) if !uniform and len(live) <= packedMax
	kd      []uint64  // -((2^31-1)·iw[i] + i + 1), with iw (see minKeyFixed)
	kx      []float64 // 2^-31·64/iw[i], rounded up, with iw (see Ranker.pickKeyed)
	kt      []float64 // 2·live[i].weight·isc/(2^31·(1+1e-9)), with iw
	isc     float64   // 1/sc, sc = 2^26 × the smallest live weight
	wmax    float64   // maxWeight(live): skipMax on above 2·packedMax live nodes
	uniform bool      // all live weights are equal
	cls     []wclass  // weight classes if 2..maxClasses distinct live weights, else nil
	cpre    []uint64  // live hashes grouped by class (see groupClasses)
	cid     []int32   // cpre position -> index in live
	tab     *tabSet   // the first pass over 2..tabMax live nodes of varied weights, or nil
}

// New returns a Ranker over nodes. Every node must have a non-empty ID ([ErrEmptyID],
// which also rejects the zero [Node]) and a valid weight ([ErrInvalidWeight]; a Node
// built by [NewNode] always has one). Duplicate IDs collapse to their first occurrence,
// as everywhere in this package. An empty set is allowed: Pick then reports false.
// nodes is copied; the caller may reuse it.
//
// Cost: O(n) in nodes, allocates the copies and an O(n) dedup map.
func New(nodes []Node) (*Ranker, error) {
	r := &Ranker{all: make([]Node, 0, len(nodes)), uniform: true}
	seen := make(map[string]struct{}, len(nodes))
	for i, n := range nodes {
		if n.id == "" {
			return nil, fmt.Errorf("%w: node %d", ErrEmptyID, i)
		}
		if !validWeight(n.weight) {
			return nil, fmt.Errorf("%w: %v (node %q)", ErrInvalidWeight, n.weight, n.id)
		}
		if _, dup := seen[n.id]; dup {
			continue
		}
		seen[n.id] = struct{}{}
		r.all = append(r.all, n)
		if n.weight > 0 {
			if len(r.live) > 0 && n.weight != r.live[0].weight {
				r.uniform = false
			}
			r.live = append(r.live, n)
			r.pre = append(r.pre, n.pre)
		}
	}
	r.wmax = maxWeight(r.live)
	if !r.uniform && len(r.live) <= packedMax {
		wmin := math.Inf(1)
		for _, n := range r.live {
			wmin = min(wmin, n.weight)
		}
		r.isc = 0x1p-26 / wmin
		for i, n := range r.live {
			iw := uint64(0x1p26*(wmin/n.weight)) << 6
			r.iw = append(r.iw, iw)
			r.kd = append(r.kd, -((1<<31-1)*iw + uint64(i) + 1))
			r.kx = append(r.kx, 0x1p-25/float64(iw)*(1+0x1p-40))
			r.kt = append(r.kt, 2*n.weight*r.isc/(0x1p31*(1+1e-9)))
		}
		if len(r.live) <= tabMax {
			r.tab = newTabSet(r.pre, r.iw, r.kd, r.kx, r.kt)
		}
	} else if !r.uniform {
		r.groupClasses()
	}
	return r, nil
}

// Len returns the number of distinct nodes (including weight 0). O(1).
func (r *Ranker) Len() int { return len(r.all) }

// Nodes returns a copy of the distinct nodes in their input order (first occurrences).
// O(n), allocates the copy.
func (r *Ranker) Nodes() []Node { return append([]Node(nil), r.all...) }

// Pick returns the winner for keyHash and true, or the zero Node and false if the set
// has no node with a positive weight. Same result as [Pick] over the nodes given to [New].
// Cost: O(n) in nodes, 0 allocs; with equal weights one mix and one compare per node
// over a contiguous []uint64 (branch-free up to 64 nodes, unrolled by four above). With
// varied weights over up to 64 live nodes, the branch-free keyed selection of [Pick] in
// integers: one mix, one integer product and one addition per node over the contiguous
// hashes and the fixed-point inverse weights and offsets prepared by [New] (no division,
// no conversion; up to 8 live nodes also one shift, one load from a shared 4 KiB table
// and one subtraction, for keys that bound the logarithm's higher-order terms too), a
// proof from the winner's key without its mix, a second pass with a short polynomial
// (in binary64, as Pick's) on about 0.5 % of the keys at 8 nodes (2 % at 64), the exact
// selection on near-ties. Above 64 live nodes, with 2 to 8 distinct weights and at
// least 8 live nodes per weight on average, the equal-weight loop per weight class (the
// score is increasing in u for a fixed weight) and an exact comparison of the class
// winners, classes of more than 64 nodes scanned with an integer limit from the leader's
// score so that a class that cannot win costs one pass. With other varied weights as
// [Pick] without the duplicate scan, and above 128 live nodes one integer compare per
// node that cannot win even with the set's largest weight (the conversion and product
// of the weighted scan only for the others).
func (r *Ranker) Pick(keyHash uint64) (Node, bool) { return r.pickUniform(keyHash, newMixer()) }

// pickUniform is Pick (which inlines to a call of it with the constants of c, see
// mixer, so that Pick has no frame of its own): over 1 to packedMax live nodes of one
// weight the branch-free loop maxPacked; over 2 to tabMax live nodes of varied weights
// the first pass of tab and its proof (one call down to the loop instead of four
// frames, with tab's arrays: about 3.5 ns less at 8 nodes), then pickTabSlow if the
// proof fails; everything else, and a maximum reached twice, goes on to pick. (The loops stay in their
// functions: copied in here, the compiler turns their running maxima into branches,
// 30 % slower at 64 nodes for maxPacked.)
//
//go:noinline
func (r *Ranker) pickUniform(keyHash uint64, c mixer) (Node, bool) {
	kp := premix(keyHash)
	if !r.uniform || uint(len(r.pre)-1) >= packedMax {
		if s := r.tab; s != nil {
			b, b2 := s.first(kp, c)
			if i := s.winner(b); s.proven(b, b2, i) {
				return r.live[i], true
			}
			return r.pickTabSlow(kp)
		}
		return r.pick(kp)
	}
	if i, ok := maxPacked(kp, r.pre, c); ok {
		return r.live[i], true
	}
	return r.pick(kp)
}

// pick is Pick after pickUniform's equal-weight loop declined.
func (r *Ranker) pick(kp uint64) (Node, bool) {
	live := r.live
	if len(live) == 0 {
		return Node{}, false
	}
	if r.iw != nil {
		if i, ok := r.pickKeyed(kp); ok {
			return live[i], true
		}
	}
	if r.cls != nil {
		return live[r.pickClasses(kp)], true
	}
	if !r.uniform {
		return live[pickGeneral(kp, live, nil, r.pre, r.wmax)], true
	}
	if len(live) > packedMax {
		return live[r.maxUnrolled(kp)], true
	}
	return live[pickGeneral(kp, live, nil, r.pre, r.wmax)], true // two nodes may tie on m: decide by ID
}

// pickTabSlow is Pick over a Ranker with a tab after its first proof failed (about
// 0.5 % of the keys at 8 nodes): pickKeyed's second pass, then the exact selection.
func (r *Ranker) pickTabSlow(kp uint64) (Node, bool) {
	if i, ok := r.pickKeyedP(kp); ok {
		return r.live[i], true
	}
	return r.live[pickGeneral(kp, r.live, nil, r.pre, r.wmax)], true
}

// maxUnrolled is the package-level maxUnrolled over the contiguous hashes (no weights).
func (r *Ranker) maxUnrolled(kp uint64) int {
	bi, bz := -1, uint64(0)
	for i := 0; ; i++ {
		var z uint64
		if i, z = scanPre(kp, r.pre, i, bz&^low33, newMixer()); i == len(r.pre) {
			return bi
		}
		if bi < 0 || ahead(z, r.live[i].id, bz, r.live[bi].id) {
			bi, bz = i, z
		}
	}
}

// Rank returns the nodes with a positive weight in the canonical order, best first
// (see [Rank]). O(n log n), allocates the result and O(n) scratch.
func (r *Ranker) Rank(keyHash uint64) []Node {
	kp := premix(keyHash)
	keys := make([]key, len(r.live))
	for i := range r.live {
		keys[i] = keyOf(kp, &r.live[i], i)
	}
	sortKeys(keys, r.uniform)
	out := make([]Node, len(keys))
	for j := range keys {
		out[j] = r.live[keys[j].i]
	}
	return out
}

// TopK appends to dst[:0] the first k nodes of the canonical order, best first, and
// returns the extended slice (fewer than k if the set has fewer live nodes; k <= 0
// returns dst[:0]). Same order as [Ranker.Rank].
// Cost: O(n) in nodes plus O(k) per insertion into the running top k; 0 allocs if
// cap(dst) >= k.
func (r *Ranker) TopK(dst []Node, keyHash uint64, k int) []Node {
	dst = dst[:0]
	if k <= 0 {
		return dst
	}
	kp := premix(keyHash)
	var thr key
	for i := range r.live {
		n := &r.live[i]
		c := keyOf(kp, n, 0)
		if len(dst) == k {
			if !outranks(&c, &thr) {
				continue
			}
			dst = dst[:k-1]
		}
		j := len(dst)
		for j > 0 {
			o := keyOf(kp, &dst[j-1], 0)
			if !before(&c, &o) {
				break
			}
			j--
		}
		dst = append(dst, Node{})
		copy(dst[j+1:], dst[j:])
		dst[j] = *n
		if len(dst) == k {
			thr = keyOf(kp, &dst[k-1], 0)
		}
	}
	return dst
}
