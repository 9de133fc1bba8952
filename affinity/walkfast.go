package affinity

import (
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
)

// walkFast answers the walk's two common outcomes over a remembered candidate list es
// (candcache.go), up to walkInline candidates, keeping only each candidate's load:
//
//   - placing (bound < 0): when some candidate is Healthy, the candidates have one weight
//     and some Healthy one is under the bound, the best-ranked of those (largest m,
//     unique) — the first of the ranking under the bound (placeFast);
//   - a hit on a Healthy candidates[bound] whose backend is under the bound: it stays
//     (w = -1, boundOver false; stayFast).
//
// Anything else — a candidate that differs from es, weights that differ, a tie of m, no
// Healthy candidate, none under the bound, the hit's backend over it — reports ok = false
// and walkFull decides by the same rules over its full scratch; where walkFast answers,
// walkFull answers the same for the same load view. Cost per candidate: its remembered
// entry, its load view and (placing, under the bound) its rank key, in loops that call nothing in the
// common case (no drain model, every backend Healthy); 0 allocs.
func (s *Scheduler) walkFast(kh uint64, cands []Backend, es []candEntry, units int64, bound int) (placement, bool) {
	if bound < 0 {
		return s.placeFast(kh, cands, es, units)
	}
	return s.stayFast(cands, es, units, bound)
}

func (s *Scheduler) placeFast(kh uint64, cands []Backend, es []candEntry, units int64) (placement, bool) {
	if len(cands) > walkInline {
		return placement{}, false
	}
	// First pass: which candidates count and their loads (loads[i] < 0: not eligible);
	// second pass, free of calls: the rank keys of those under the bound.
	var loads [walkInline]int64
	n, total, ok := s.fastLoads(cands, es, loads[:len(cands)], true)
	if !ok || n == 0 {
		return placement{}, false
	}
	// The first backend of the ranking under the bound is the best-ranked one among
	// those under it (equal weights: the largest m); only they need a rank key.
	limit := s.ld.p.factor * float64(total+units) / float64(n)
	best, tie := -1, false
	var bestM uint64
	for i := range cands {
		load := loads[i]
		if load < 0 || (load != 0 && float64(load+units) > limit) {
			continue // not eligible, or over the bound
		}
		if m := hrw.Mix(kh, cands[i].node.Hash()) >> 11; best < 0 || m > bestM {
			best, bestM, tie = i, m, false
		} else if m == bestM {
			tie = true
		}
	}
	if best < 0 || tie { // none under the bound (the least loaded then), or a tie
		return placement{}, false
	}
	return placement{w: best, st: health.Healthy, bl: es[best].bl, load: loads[best]}, true
}

// fastLoads sets loads[i] to candidate i's load view when it is Healthy and not a later
// copy of an ID, else to -1, and returns how many are Healthy and their summed load; ok
// is false when a candidate differs from es or, with oneWeight, the weights differ. Without the drain
// model and with every backend Healthy (the common case) its loop calls nothing, so it
// keeps its state in registers.
func (s *Scheduler) fastLoads(cands []Backend, es []candEntry, loads []int64, oneWeight bool) (n int, total int64, ok bool) {
	q := &s.ld.p
	w0 := cands[0].node.Weight()
	es = es[:len(cands)]
	if q.drainRate == 0 && s.health.AllHealthy() {
		for i := range cands {
			c := &cands[i].node
			e := &es[i]
			if !e.matches(c) || (oneWeight && c.Weight() != w0) {
				return 0, 0, false
			}
			loads[i] = -1
			if e.bl == nil { // a later copy of an ID
				continue
			}
			_, l := e.bl.counts()
			load := e.bl.withReported(q, l) // view without the drain model
			loads[i] = load
			n++
			total += load
		}
		return n, total, true
	}
	now := s.drainNow()
	allHealthy := s.health.AllHealthy()
	for i := range cands {
		c := &cands[i].node
		e := &es[i]
		if !e.matches(c) || (oneWeight && c.Weight() != w0) {
			return 0, 0, false
		}
		loads[i] = -1
		if e.bl == nil || (!allHealthy && s.health.State(c.ID()) != health.Healthy) {
			continue // a later copy of an ID; Draining and Down do not count while one is Healthy
		}
		load := e.bl.view(q, now)
		loads[i] = load
		n++
		total += load
	}
	return n, total, true
}

func (s *Scheduler) stayFast(cands []Backend, es []candEntry, units int64, bound int) (placement, bool) {
	if len(cands) > walkInline {
		return placement{}, false
	}
	var loads [walkInline]int64
	n, total, ok := s.fastLoads(cands, es, loads[:len(cands)], false)
	if !ok || n == 0 || loads[bound] < 0 { // no Healthy candidate, or the hit's is not
		return placement{}, false
	}
	load := loads[bound]
	limit := s.ld.p.factor * float64(total+units) / float64(n)
	if load != 0 && float64(load+units) > limit {
		return placement{}, false
	}
	return placement{w: -1, boundLoad: load}, true
}
