package hrw

import (
	"cmp"
	"slices"
)

// Weight classes: a Ranker whose live nodes carry only a few distinct weights picks by
// class. For a fixed weight w the score s = -w/ln(u) is strictly increasing in u (ln is
// increasing and negative on (0,1)), hence in m, so within one class the canonical
// winner is the node with the largest m and, on equal m, the smallest ID: exactly the
// equal-weight selection, with no logarithm. The overall winner is the best of the k
// class winners under the exact order (score, then m, then ID), which takes at most k
// bound evaluations and, on near-ties, logarithms. This is the logarithmic method of
// weighted rendezvous hashing (Schindelhauer and Schomaker, SPAA 2005; Resch 2015)
// evaluated class by class; the placement is the one every other selection computes.

// maxClasses is the largest number of distinct live weights for which a Ranker picks by
// class; above it the weighted selection of Pick (bounds per escaping node) is used.
// Up to packedMax live nodes a Ranker never picks by class: the keyed selection
// (weighted.go) is faster there.
const maxClasses = 8

// minClassSize is the smallest average class size for which a Ranker picks by class
// (fewer nodes per class: the per-class loops and the comparison of their winners cost
// more than the escaping nodes' bounds of the weighted selection).
const minClassSize = 8

// wclass is one weight class of a Ranker: its weight and the end of its range in
// Ranker.cpre (the range starts where the previous class ends).
type wclass struct {
	w   float64
	end int
}

// groupClasses fills r.cls, r.cpre and r.cid from r.live if it has between 2 and
// maxClasses distinct weights and at least minClassSize nodes per class on average:
// hashes grouped by weight class (classes by decreasing weight, nodes in input order
// within a class). Otherwise it leaves them nil.
func (r *Ranker) groupClasses() {
	var ws []float64
	for i := range r.live {
		w := r.live[i].weight
		if !contains(ws, w) {
			if len(ws) == maxClasses {
				return
			}
			ws = append(ws, w)
		}
	}
	if len(ws) < 2 || len(r.live) < minClassSize*len(ws) {
		return
	}
	slices.SortFunc(ws, func(a, b float64) int { return cmp.Compare(b, a) })
	r.cls = make([]wclass, 0, len(ws))
	r.cpre = make([]uint64, 0, len(r.live))
	r.cid = make([]int32, 0, len(r.live))
	for _, w := range ws {
		for i := range r.live {
			if r.live[i].weight == w {
				r.cpre = append(r.cpre, r.live[i].pre)
				r.cid = append(r.cid, int32(i))
			}
		}
		r.cls = append(r.cls, wclass{w: w, end: len(r.cpre)})
	}
}

func contains(ws []float64, w float64) bool {
	for _, v := range ws {
		if v == w {
			return true
		}
	}
	return false
}

// pickClasses returns the index in r.live of the winner for premixed key kp: the best
// of the class winners (see the comment at the top of this file). Classes come
// heaviest first, so the first winner is usually the overall one; every later class is
// scanned with the integer limit limFor(w, lower bound of the leader's score), below
// which none of its nodes can win, so a lighter class usually costs one equal-weight
// pass and no bound. The IDs in a Ranker are distinct, so (score, m, ID) orders any two
// nodes.
func (r *Ranker) pickClasses(kp uint64) int {
	var l leader
	bi, s := -1, 0
	for _, c := range r.cls {
		lim := uint64(0)
		if bi >= 0 && c.end-s > packedMax {
			lim = limFor(c.w, l.lower())
		}
		p, m := r.classMax(kp, s, c.end, lim)
		s = c.end
		if p < 0 {
			continue
		}
		i := int(r.cid[p])
		if bi < 0 {
			l.set(c.w, m, r.live[i].id)
			bi = i
		} else if l.beatenBy(c.w, m, r.live[i].id) {
			bi = i
		}
	}
	return bi
}

// classMax returns the position in r.cpre of the equal-weight winner among positions
// [s, e) (largest m, then smallest ID) and its m, or -1 if no node there has a mid value
// >= lim (low 33 bits clear). Up to packedMax nodes it runs the branch-free loop unless
// two nodes may tie, else the unrolled scan with exact compares.
func (r *Ranker) classMax(kp uint64, s, e int, lim uint64) (int, uint64) {
	pre := r.cpre[s:e]
	if len(pre) <= packedMax {
		if i, ok := maxPacked(kp, pre, newMixer()); ok {
			if z := mid(kp ^ pre[i]); z >= lim {
				return s + i, last(z) >> 11
			}
			return -1, 0
		}
	}
	bi, bz := -1, lim
	for i := 0; ; i++ {
		var z uint64
		if i, z = scanPre(kp, pre, i, bz&^low33, newMixer()); i == len(pre) {
			if bi < 0 {
				return -1, 0
			}
			return s + bi, last(bz) >> 11
		}
		if bi < 0 || ahead(z, r.live[r.cid[s+i]].id, bz, r.live[r.cid[s+bi]].id) {
			bi, bz = i, z
		}
	}
}
