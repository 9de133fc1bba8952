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
	load      int64        // its load before this request, prompt tokens
	boundLoad int64        // load of the excluded (bound) candidate
	boundOver bool         // the excluded candidate is over the bound, this request counted
}

// rankedCand is one eligible candidate with its HRW rank key and its load.
type rankedCand struct {
	i    int     // index in candidates
	m    uint64  // hrw.Mix(keyHash, node hash) >> 11
	s    float64 // score, only when the weights differ
	w    float64 // weight
	load int64   // the backend's load view, prompt tokens
	bl   *backendLoad
	st   health.State
}

// walkInline is the number of candidates whose walk runs on stack scratch; more use a
// pooled walkScratch.
const walkInline = 64

type walkScratch struct {
	r   []rankedCand
	set []int32
}

// walk is the bounded-load walk along the session's HRW ranking over the eligible
// candidates (Healthy; Draining only when none is Healthy; never Down; duplicate IDs
// collapse to the first). Load is the backend's load view in prompt tokens; the bound is
// balance_factor x (sum of the eligible loads + units) / their number, and a backend is
// under it when load + units <= bound or when it is idle (load 0).
//
// bound < 0 (placing a session): the first backend under the bound; if none is, the least
// loaded (ties in ranking order). bound >= 0 (a hit on candidates[bound]): reports
// whether the bound backend is over the bound and returns the first backend ranked after
// it that is under the bound, or w = -1 when none is.
//
// Deterministic for a given load view. Cost: O(n) load reads, rank keys and compares (no
// sort: the first backend under the bound in ranking order is the best-ranked of those
// under it). 0 allocs up to 64 candidates (a pooled scratch beyond).
func (s *Scheduler) walk(kh uint64, cands []Backend, units int64, bound int) (placement, error) {
	if len(cands) <= walkInline {
		var rb [walkInline]rankedCand
		var set [2 * walkInline]int32
		return s.walkIn(kh, cands, units, bound, rb[:0], set[:])
	}
	sc, ok := s.ld.scratch.Get().(*walkScratch)
	if !ok {
		sc = &walkScratch{}
	}
	size := 1 << bits.Len(uint(2*len(cands)-1)) // power of two >= 2n
	if cap(sc.set) < size {
		sc.set = make([]int32, size)
	}
	sc.set = sc.set[:size]
	clear(sc.set)
	if cap(sc.r) < len(cands) {
		sc.r = make([]rankedCand, 0, len(cands))
	}
	pl, err := s.walkIn(kh, cands, units, bound, sc.r[:0], sc.set)
	clear(sc.r[:cap(sc.r)]) // drop the *backendLoad pointers
	s.ld.scratch.Put(sc)
	return pl, err
}

// walkIn is walk over the given scratch: r (empty, with room for len(cands)) and set (a
// zeroed power-of-two table of at least 2 x len(cands) slots, for the duplicate check).
func (s *Scheduler) walkIn(kh uint64, cands []Backend, units int64, bound int, r []rankedCand, set []int32) (placement, error) {
	q := s.ld.p.queuedCost
	mask := len(set) - 1
	anyHealthy := false
	pl := placement{w: -1}
	var bk rankedCand // rank key of the bound candidate (bound >= 0)
	for i := range cands {
		c := &cands[i]
		if isZero(c) {
			return pl, invalidCandidate(i)
		}
		h := c.node.Hash()
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
		if dup {
			continue
		}
		bl := s.ld.loads.get(c.node.ID(), h)
		load := bl.view(q)
		if i == bound {
			pl.boundLoad = load
			bk = rankedCand{i: i, m: hrw.Mix(kh, h) >> 11, w: c.node.Weight()}
		}
		st := s.state(c.node.ID())
		if st == health.Down {
			continue
		}
		anyHealthy = anyHealthy || st == health.Healthy
		r = append(r, rankedCand{i: i, m: hrw.Mix(kh, h) >> 11, w: c.node.Weight(), load: load, bl: bl, st: st})
	}
	// Keep the eligible state only; sum their loads; note whether the weights differ.
	want := health.Draining
	if anyHealthy {
		want = health.Healthy
	}
	n, varied := 0, false
	var total int64
	for _, rc := range r {
		if rc.st != want {
			continue
		}
		varied = varied || rc.w != r[0].w
		r[n] = rc
		n++
		total += rc.load
	}
	r = r[:n]
	if n == 0 {
		return pl, noEligible(cands)
	}
	if bound >= 0 && bk.w != r[0].w {
		varied = true
	}
	if varied {
		for j := range r {
			r[j].s = hrw.Score(kh, cands[r[j].i].node)
		}
		if bound >= 0 {
			bk.s = hrw.Score(kh, cands[bound].node)
		}
	}
	limit := s.ld.p.factor * float64(total+units) / float64(n)
	under := func(load int64) bool { return load == 0 || float64(load+units) <= limit }
	if bound >= 0 {
		pl.boundOver = !under(pl.boundLoad)
	}
	better := func(a, b *rankedCand) bool {
		if varied && a.s != b.s {
			return a.s > b.s
		}
		if a.m != b.m {
			return a.m > b.m
		}
		if ia, ib := cands[a.i].node.ID(), cands[b.i].node.ID(); ia != ib {
			return ia < ib
		}
		return a.i < b.i
	}
	take := func(rc *rankedCand) (placement, error) {
		pl.w, pl.st, pl.bl, pl.load = rc.i, rc.st, rc.bl, rc.load
		return pl, nil
	}
	// A spill only moves down the session's ranking: to candidates ranked after the bound
	// one (so a binding can never move back: no ping-pong).
	after := func(rc *rankedCand) bool { return bound < 0 || better(&bk, rc) }
	// The first backend of the ranking under the bound is the best-ranked one among those
	// under it: one pass, no sort. The fallback is the least loaded (ties: ranking).
	first, least := -1, -1
	for j := range r {
		rc := &r[j]
		if !after(rc) {
			continue
		}
		if under(rc.load) && (first < 0 || better(rc, &r[first])) {
			first = j
		}
		if least < 0 || rc.load < r[least].load || (rc.load == r[least].load && better(rc, &r[least])) {
			least = j
		}
	}
	switch {
	case first >= 0:
		return take(&r[first])
	case bound >= 0 || least < 0:
		return pl, nil // a spill needs a target under the bound
	}
	return take(&r[least])
}
