package affinity

import (
	"github.com/agentserve/sessionaffinity/health"
)

// placeFast and stayFast answer the walk's two common outcomes over a remembered
// candidate list es (candcache.go), up to walkInline candidates, keeping only each
// candidate's load (and, placing, its rank key):
//
//   - placing (bound < 0): when some candidate is Healthy, the candidates have one weight
//     and some Healthy one is under the bound, the best-ranked of those (largest m,
//     unique) — the first of the ranking under the bound (placeFast: its index w, a
//     Healthy backend, and its load);
//   - a hit on a Healthy candidates[bound], the candidates having one weight: it stays
//     when its backend is under the bound (stayFast: its load; the placement w = -1,
//     boundOver false), else stayFast also finds the spill target, the best-ranked
//     backend ranked after the hit's that is under the bound (w = -1 when none is).
//
// Both compute the bound of equal weights only (balance_factor x (total + units) / n,
// the same expression as walkIn). Anything else — a candidate that differs from es,
// weights that differ (the weighted bound of rule 15), a tie of the rank keys, no
// Healthy candidate, none under the bound (placing) — reports ok =
// false and walkFull decides by the same rules over its full scratch; where
// these answer, walkFull answers the same for the same load view. They return scalars,
// not a placement, so that no struct is copied through the stack on the way back. Cost
// per candidate: its remembered entry, its load view and (placing) its rank key, in loops
// that call nothing in the common case (no drain model, every backend Healthy); placing
// takes one pass when the HRW winner is under the bound, else a second over the loads and
// keys kept on the stack; 0 allocs.
func (s *Scheduler) placeFast(kh uint64, cands []Backend, es []candEntry, units int64) (w int, load int64, ok bool) {
	if len(cands) > walkInline {
		return -1, 0, false
	}
	// One pass over the candidates: which count, their loads and their rank keys (the top
	// 31 bits of splitmix64's mid value, as pickEqual ranks: see pickequal.go); then one
	// over those two arrays, free of calls and memory beyond them.
	var la [walkInline]int64
	var ta [walkInline]uint64
	loads, tops := la[:len(cands)], ta[:len(cands)]
	var n, bi int
	var total int64
	tie := true
	if s.ld.p.drainRate == 0 && s.health.AllHealthy() { // the common case
		n, total, bi, tie, ok = placeLoads(cands, es, loads, tops, premix(kh), &s.ld.p, newMixer())
	} else {
		n, total, ok = s.fastLoads(cands, es, loads, tops, premix(kh))
	}
	if !ok || n == 0 {
		return -1, 0, false
	}
	// The first backend of the ranking under the bound is the best-ranked one among
	// those under it (equal weights: the largest m). Its top 31 bits rank it unless
	// another under the bound shares them (tv == bt; m may still differ): walkFull
	// decides those, about n·2^-31 of the keys. A loop of conditional moves: whether a
	// candidate is under the bound is as unpredictable as its load. A candidate's load
	// plus units is an integer below 2^53, so the integer bound lim settles it.
	_, lim := s.ld.p.equalBound(total, units, n)
	if load := loads[bi]; !tie && (load == 0 || load+units <= lim) {
		// The HRW winner is under the bound (the common case): it is the answer.
		return bi, load, true
	}
	tops = tops[:len(loads)]
	bi = 0
	bt, tv := uint64(0), uint64(1)
	for i, load := range loads {
		t := tops[i] // 0: not counted
		if load != 0 && load+units > lim {
			t = 0 // over the bound
		}
		if t == bt {
			tv = t
		}
		if t > bt {
			bi = i
		}
		bt = max(bt, t)
	}
	if bt == 0 || tv == bt { // none under the bound (the least loaded then), or a tie
		return -1, 0, false
	}
	return bi, loads[bi], true
}

// placeLoads is fastLoads for placing in its common case (no drain model, every backend
// Healthy), in a loop of its own that keeps its state in registers: per candidate the
// remembered entry's check, the load record's two words, two multiplies and three
// conditional moves. It also returns the best-ranked counted candidate bi (the largest
// rank key) and whether its rank key is shared (tie: walkFull decides).
func placeLoads(cands []Backend, es []candEntry, loads []int64, tops []uint64, kp uint64, q *loadParams, c mixer) (n int, total int64, bi int, tie, ok bool) {
	es, loads, tops = es[:len(cands)], loads[:len(cands)], tops[:len(cands)]
	w0, m := cands[0].wbits, q.minCost // m read once: the loop's stores may alias *q for the compiler
	bt, tv := uint64(0), uint64(1)
	for i := range cands {
		b, e := &cands[i], &es[i]
		if !e.matches(&b.node) || b.wbits != w0 {
			return 0, 0, 0, false, false
		}
		load, t := int64(-1), uint64(0)
		if bl := e.bl; bl != nil { // not a later copy of an ID
			load = bl.sumView(q, m)
			t = c.mid(kp^b.pre)&c.hi | 1
			n++
			total += load
		}
		loads[i], tops[i] = load, t
		if t == bt {
			tv = t
		}
		if t > bt {
			bi = i
		}
		bt = max(bt, t)
	}
	return n, total, bi, tv == bt, true
}

// fastLoads sets loads[i] to candidate i's load view when it is Healthy and not a later
// copy of an ID, else to -1, and returns how many are Healthy and their summed load; ok
// is false when a candidate differs from es or when the candidates' weights differ (the
// bound is then per candidate, rule 15: walkFull applies it). With tops (placing),
// tops[i] is set to the rank key of each counted
// candidate: the top 31 bits of the mid value of splitmix64 for kp = premix(key hash)
// (pickequal.go); placing in the common case (no drain model, every backend Healthy)
// takes placeLoads instead. Without tops, in that common case, its loop calls nothing,
// so it keeps its state in registers.
func (s *Scheduler) fastLoads(cands []Backend, es []candEntry, loads []int64, tops []uint64, kp uint64) (n int, total int64, ok bool) {
	q := &s.ld.p
	w0 := cands[0].wbits
	es, loads = es[:len(cands)], loads[:len(cands)]
	if tops == nil && q.drainRate == 0 && s.health.AllHealthy() { // placing has placeLoads
		m := q.minCost // read once
		for i := range cands {
			b, e := &cands[i], &es[i]
			if !e.matches(&b.node) || b.wbits != w0 {
				return 0, 0, false
			}
			loads[i] = -1
			if e.bl == nil { // a later copy of an ID
				continue
			}
			load := e.bl.sumView(q, m) // view without the drain model
			loads[i] = load
			n++
			total += load
		}
		return n, total, true
	}
	if tops != nil {
		tops = tops[:len(cands)]
	}
	c := newMixer()
	now := s.drainNow()
	allHealthy := s.health.AllHealthy()
	for i := range cands {
		b, e := &cands[i], &es[i]
		if !e.matches(&b.node) || b.wbits != w0 {
			return 0, 0, false
		}
		loads[i] = -1
		if tops != nil {
			tops[i] = 0
		}
		if e.bl == nil || (!allHealthy && s.health.State(b.node.ID()) != health.Healthy) {
			continue // a later copy of an ID; Draining and Down do not count while one is Healthy
		}
		load := e.bl.view(q, now)
		loads[i] = load
		n++
		total += load
		if tops != nil {
			tops[i] = c.mid(kp^b.pre)&c.hi | 1 // never 0
		}
	}
	return n, total, true
}

func (s *Scheduler) stayFast(kh uint64, cands []Backend, es []candEntry, units int64, bound int) (sp spillFast, ok bool) {
	if len(cands) > walkInline {
		return sp, false
	}
	var la [walkInline]int64
	loads := la[:len(cands)]
	n, total, ok := s.fastLoads(cands, es, loads, nil, 0)
	if !ok || n == 0 || loads[bound] < 0 { // no Healthy candidate, or the hit's is not
		return sp, false
	}
	sp.boundLoad = loads[bound]
	limit, lim := s.ld.p.equalBound(total, units, n)
	if load := sp.boundLoad; load == 0 || float64(load+units) <= limit {
		return sp, true // under the bound: it stays, no ranking needed
	}
	// Over the bound: the first backend ranked after the hit's that is under the bound
	// is the best-ranked of those, ranked by the top 31 bits of the mid value as in
	// placeFast. A candidate whose top bits equal the hit's (the full order decides which
	// comes first), or two targets sharing the best top bits, decline to walkFull.
	sp.over, sp.w = true, -1
	kp, c := premix(kh), newMixer()
	tb := c.mid(kp^cands[bound].pre) & c.hi
	bt, tv := uint64(0), uint64(1)
	for i, load := range loads {
		if load < 0 || i == bound {
			continue // not eligible (or a later copy of an ID), or the hit's own
		}
		t := c.mid(kp^cands[i].pre)&c.hi | 1 // never 0
		if t&^1 == tb {
			return sp, false
		}
		if t > tb || (load != 0 && load+units > lim) {
			continue // ranked before the hit's backend, or over the bound
		}
		if t == bt {
			tv = t
		}
		if t > bt {
			sp.w, sp.load = i, load
		}
		bt = max(bt, t)
	}
	if sp.w >= 0 && tv == bt {
		return sp, false
	}
	return sp, true
}

// spillFast is stayFast's answer: the hit's backend's load (boundLoad) and whether it is
// over the bound; when it is, the spill target w (-1: none under the bound ranked after
// it) and the target's load. Four words: the compiler keeps it in registers.
type spillFast struct {
	w               int
	load, boundLoad int64
	over            bool
}

// equalBound returns the bound of candidates of one weight, balance_factor x (total +
// units) / n (rule 15), as a float (the expression of every release, so placements stay
// bit for bit the same) and as lim, its floor clamped to 2^62: a load plus units (an
// integer below 2^53) is <= limit exactly when it is <= lim, which lets the fast loops
// compare integers. n > 0. O(1).
func (p *loadParams) equalBound(total, units int64, n int) (limit float64, lim int64) {
	limit = p.factor * float64(total+units) / float64(n)
	lim = 1 << 62 // every load is under such a bound
	if limit < 1<<62 {
		lim = int64(limit)
	}
	return limit, lim
}
