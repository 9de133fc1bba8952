package affinity

import (
	"math/bits"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
)

// placement is the outcome of a bounded-load walk (or of pick, with load awareness off).
type placement struct {
	w         int          // chosen candidate index; -1: none
	st        health.State // its health state, re-checked under the shard lock that inserts
	bl        *backendLoad // its load record (nil with load awareness off)
	load      int64        // its load before this request, prompt tokens (a spill from spillTarget: its wait)
	boundLoad int64        // load of the excluded (bound) candidate (a spill from spillTarget: its wait)
	boundOver bool         // the excluded candidate is over the bound, this request counted
}

// walkInline is the number of candidates whose walk runs on stack scratch; more use a
// pooled walkScratch.
const walkInline = 64

// walkScratch holds, per candidate, what the walk reads once: the candidate's HRW rank key
// (m = hrw.Mix(keyHash, node hash) >> 11, and the score when weights differ), its load
// record (nil for a later copy of an ID) and load view, and its health state (stateSkip
// for Down or a later duplicate).
type walkScratch struct {
	m    []uint64
	s    []float64 // nil until weights are found to differ (stack walks)
	load []int64
	bl   []*backendLoad
	st   []health.State
	set  []int32 // duplicate check: open addressing over node hashes, 1 + candidate index
}

// stateSkip marks a candidate the walk ignores (Down, or a later copy of an ID).
const stateSkip = health.State(0xff)

func (w *walkScratch) size(n int) {
	if cap(w.m) < n {
		w.m, w.s, w.load = make([]uint64, n), make([]float64, n), make([]int64, n)
		w.bl, w.st = make([]*backendLoad, n), make([]health.State, n)
	}
	w.m, w.s, w.load, w.bl, w.st = w.m[:n], w.s[:n], w.load[:n], w.bl[:n], w.st[:n]
	size := 1 << bits.Len(uint(2*n-1)) // power of two >= 2n
	if cap(w.set) < size {
		w.set = make([]int32, size)
	}
	w.set = w.set[:size]
	clear(w.set)
}

// walk is the bounded-load walk along the session's HRW ranking over the eligible
// candidates (Healthy; Draining only when none is Healthy; never Down; duplicate IDs
// collapse to the first). Load is the backend's load view in prompt tokens; the bound is
// balance_factor x (sum of the eligible loads + units) / their number when the eligible
// candidates have one weight, and balance_factor x (sum of the eligible loads + units) x
// w_i / W for candidate i when their weights differ (W: the sum of the eligible weights;
// rule 15), and a backend is under its bound when load + units <= bound or when it is
// idle (load 0).
//
// bound < 0 (placing a session): the first backend under its bound; if none is, the
// least loaded (relative to weight, load / w_i, when the eligible weights differ; ties
// in ranking order). bound >= 0 (a hit on candidates[bound]): reports whether the bound
// backend is over its bound and returns the first backend ranked after it that is under
// its own, or w = -1 when none is.
//
// Deterministic for a given load view. Cost: O(n) load reads, rank keys and compares (no
// sort: the first backend under the bound in ranking order is the best-ranked of those
// under it); a candidate list the walk has seen recently (candcache.go) reads its load
// records from one array, others look each up and check duplicate IDs. 0 allocs up to 64
// candidates (a pooled scratch beyond), except when candcache.go stores a new list. The
// common cases over a remembered list — the HRW winner is under the bound, or a hit's
// backend is — take placeFast or stayFast (walkfast.go), which keep only the candidates'
// loads (and rank keys).
func (s *Scheduler) walk(kh uint64, cands []Backend, units int64, bound int) (placement, error) {
	if es := s.ld.cands.list(cands); es != nil {
		if bound < 0 {
			if w, load, ok := s.placeFast(kh, cands, es, units); ok {
				return placement{w: w, st: health.Healthy, bl: es[w].bl, load: load}, nil
			}
		} else if sp, ok := s.stayFast(kh, cands, es, units, bound); ok {
			pl := placement{w: sp.w, boundLoad: sp.boundLoad, boundOver: sp.over}
			if !sp.over {
				pl.w = -1
			} else if sp.w >= 0 {
				pl.st, pl.bl, pl.load = health.Healthy, es[sp.w].bl, sp.load
			}
			return pl, nil
		}
	}
	return s.walkFull(kh, cands, units, bound)
}

// walkFull is walk over per-candidate scratch: any case, a second pass when needed.
func (s *Scheduler) walkFull(kh uint64, cands []Backend, units int64, bound int) (placement, error) {
	if len(cands) <= walkInline {
		var (
			m    [walkInline]uint64
			load [walkInline]int64
			bl   [walkInline]*backendLoad
			st   [walkInline]health.State
		)
		n := len(cands)
		w := walkScratch{m: m[:n], load: load[:n], bl: bl[:n], st: st[:n]}
		if !s.ld.cands.resolve(cands, w.bl) {
			if err := s.resolveInline(cands, w.bl); err != nil {
				return placement{w: -1}, err
			}
		}
		return s.walkIn(kh, cands, units, bound, &w)
	}
	w, ok := s.ld.scratch.Get().(*walkScratch)
	if !ok {
		w = &walkScratch{}
	}
	w.size(len(cands))
	var pl placement
	var err error
	if !s.ld.cands.resolve(cands, w.bl) {
		err = s.resolve(cands, w.bl, w.set)
	}
	if err == nil {
		pl, err = s.walkIn(kh, cands, units, bound, w)
	}
	clear(w.bl) // drop the *backendLoad pointers
	s.ld.scratch.Put(w)
	return pl, err
}

// resolveInline is resolve for up to walkInline candidates, with its duplicate set on
// the stack (only walks over lists the cache does not know zero it).
func (s *Scheduler) resolveInline(cands []Backend, bl []*backendLoad) error {
	var set [2 * walkInline]int32
	return s.resolve(cands, bl, set[:])
}

// resolve sets bl[i] to candidate i's load record, or nil when an earlier candidate has
// the same ID, using set (zeroed, a power of two >= 2 x len(cands)) for the duplicate
// check; then offers the result to the candidate cache. Fails with ErrInvalidBackend
// at a zero Backend.
func (s *Scheduler) resolve(cands []Backend, bl []*backendLoad, set []int32) error {
	mask := len(set) - 1
	for i := range cands {
		c := &cands[i]
		if isZero(c) {
			return invalidCandidate(i)
		}
		h := c.node.Hash()
		bl[i] = nil
		dup := false
		for p := int(h) & mask; ; p = (p + 1) & mask {
			j := set[p]
			if j == 0 {
				set[p] = int32(i + 1)
				break
			}
			if o := &cands[j-1]; o.node.Hash() == h && o.node.ID() == c.node.ID() {
				dup = true
				break
			}
		}
		if !dup {
			bl[i] = s.ld.loads.get(c.node.ID(), h)
		}
	}
	s.ld.cands.remember(cands, bl)
	return nil
}

// walkIn is walk over the scratch w (sized for cands, w.bl resolved).
func (s *Scheduler) walkIn(kh uint64, cands []Backend, units int64, bound int, w *walkScratch) (placement, error) {
	q := &s.ld.p
	now := s.drainNow()
	allHealthy := s.health.AllHealthy() // one snapshot: no per-candidate lookups then
	pl := placement{w: -1}
	var nH, nD int                 // eligible Healthy / Draining candidates
	var totH, totD int64           // their loads
	varied, w0 := false, uint64(0) // weights differ; the weight bits seen last
	// Placing (bound < 0): the rank keys are computed in this pass, and the best-ranked
	// Healthy and Draining candidates tracked (equal weights: the largest m; tie: a later
	// candidate with the same m), so that the common case — the HRW winner is under the
	// bound — needs no second pass.
	place := bound < 0
	bestH, bestD := -1, -1
	tieH, tieD := false, false
	for i := range cands {
		c := &cands[i]
		bl := w.bl[i]
		w.st[i] = stateSkip
		if bl == nil { // a later copy of an ID
			continue
		}
		load := bl.view(q, now)
		w.load[i] = load
		if i == bound {
			pl.boundLoad = load
		}
		if place {
			w.m[i] = hrw.Mix(kh, c.node.Hash()) >> 11
		}
		varied = varied || (w0 != 0 && c.wbits != w0) // equal weights have equal bits
		w0 = c.wbits
		st := health.Healthy
		if !allHealthy {
			st = s.health.State(c.node.ID())
		}
		switch st {
		case health.Healthy:
			w.st[i] = st
			nH++
			totH += load
			if place {
				bestH, tieH = better1(w.m, i, bestH, tieH)
			}
		case health.Draining:
			w.st[i] = st
			nD++
			totD += load
			if place {
				bestD, tieD = better1(w.m, i, bestD, tieD)
			}
		}
	}
	want, n, total, best, tie := health.Healthy, nH, totH, bestH, tieH
	if nH == 0 {
		want, n, total, best, tie = health.Draining, nD, totD, bestD, tieD
	}
	if n == 0 {
		return pl, noEligible(cands)
	}
	// The bound (rule 15): equal eligible weights, balance_factor x (total + units) / n,
	// the expression of every release before weights counted, so that equal weights
	// place bit for bit as before; weights that differ among the eligible candidates,
	// candidate i's share balance_factor x (total + units) x w_i / W (wsum = W > 0).
	limit, _ := s.ld.p.equalBound(total, units, n)
	wsum := 0.0
	if varied {
		if wsum = eligibleWeights(cands, w.st, want); wsum != 0 {
			limit = s.ld.p.factor * float64(total+units) // x w_i / W per candidate
		}
	}
	under := func(i int, load int64) bool {
		if wsum == 0 {
			return load == 0 || float64(load+units) <= limit
		}
		return load == 0 || float64(load+units) <= limit*cands[i].node.Weight()/wsum
	}
	if bound >= 0 {
		pl.boundOver = !under(bound, pl.boundLoad)
		if !pl.boundOver {
			return pl, nil // a hit under the bound stays: no ranking needed
		}
	}
	if !place { // rank keys only now when spilling: a hit under the bound never needs them
		for i := range cands {
			if w.bl[i] != nil { // not a later copy of an ID
				w.m[i] = hrw.Mix(kh, cands[i].node.Hash()) >> 11
			}
		}
	}
	// Equal weights and a unique largest m: that candidate is the first of the ranking,
	// so if it is under the bound it is the answer (the common case of a placement).
	if place && !varied && !tie && under(best, w.load[best]) {
		pl.w, pl.st, pl.bl, pl.load = best, want, w.bl[best], w.load[best]
		return pl, nil
	}
	scores := w.s
	if varied {
		if scores == nil { // a stack walk: its scores only now (equal weights never need them)
			var sc [walkInline]float64
			scores = sc[:len(cands)]
		}
		for i := range cands {
			if w.st[i] != stateSkip {
				scores[i] = hrw.Score(kh, cands[i].node)
			}
		}
	}
	// better reports whether candidate a ranks before b: score (weights differ), m, ID,
	// index — the order of package hrw.
	better := func(a, b int) bool {
		if varied && scores[a] != scores[b] {
			return scores[a] > scores[b]
		}
		if w.m[a] != w.m[b] {
			return w.m[a] > w.m[b]
		}
		if ia, ib := cands[a].node.ID(), cands[b].node.ID(); ia != ib {
			return ia < ib
		}
		return a < b
	}
	// The first backend of the ranking under the bound is the best-ranked one among those
	// under it: one pass, no sort. The fallback is the least loaded (ties: ranking);
	// relative to weight (load / w_i) when the eligible weights differ. A spill only
	// moves down the ranking: to candidates ranked after the bound one, so a binding can
	// never move back (no ping-pong).
	first, least := -1, -1
	for i := range cands {
		if w.st[i] != want || (bound >= 0 && (i == bound || better(i, bound))) {
			continue
		}
		load := w.load[i]
		if under(i, load) {
			// Equal weights: m orders alone unless it ties (then better decides).
			if first < 0 || (!varied && w.m[i] > w.m[first]) || ((varied || w.m[i] == w.m[first]) && better(i, first)) {
				first = i
			}
		}
		if least < 0 {
			least = i
		} else if wsum == 0 {
			if load < w.load[least] || (load == w.load[least] && better(i, least)) {
				least = i
			}
		} else if r, rl := float64(load)/cands[i].node.Weight(), float64(w.load[least])/cands[least].node.Weight(); r < rl || (r == rl && better(i, least)) {
			least = i
		}
	}
	take := first
	if take < 0 {
		if bound >= 0 || least < 0 {
			return pl, nil // a spill needs a target under the bound
		}
		take = least
	}
	pl.w, pl.st, pl.bl, pl.load = take, w.st[take], w.bl[take], w.load[take]
	return pl, nil
}

// eligibleWeights returns W, the sum of the weights of the candidates in state want
// (the eligible ones: st marks later copies of an ID and Down candidates stateSkip), when
// those weights differ, else 0 (equal eligible weights: the bound is the unweighted one).
// Called only when some candidates' weights differ; O(len(cands)).
func eligibleWeights(cands []Backend, st []health.State, want health.State) float64 {
	var sum float64
	w0, differ := uint64(0), false
	for i := range cands {
		if st[i] != want {
			continue
		}
		differ = differ || (w0 != 0 && cands[i].wbits != w0)
		w0 = cands[i].wbits
		sum += cands[i].node.Weight()
	}
	if !differ {
		return 0
	}
	return sum
}

// better1 folds candidate i into the running best-ranked candidate b of equal weights
// (largest m) and reports whether the best's m is shared (tie: the full ranking with its
// ID and index tie-breaks must decide).
func better1(m []uint64, i, b int, tie bool) (int, bool) {
	switch {
	case b < 0 || m[i] > m[b]:
		return i, false
	case m[i] == m[b]:
		return b, true
	}
	return b, tie
}
