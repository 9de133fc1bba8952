package affinity

import "sync/atomic"

// AcquireWithParent is [Scheduler.Acquire] with the parent-session placement hint of
// [Scheduler.SelectBackendWithParent]: when the hint applies (a first turn, the parent
// validly bound to an eligible candidate in the same tier) the turn is bound to the
// parent's backend, counted as a miss and as Stats.ParentPlaced, and leased there into l
// (Lease.Outcome OutcomeMiss, AffinityHit false; charged the whole cost, as a miss is)
// and it returns [PlacedParent]; otherwise the call is exactly Acquire (Placement
// PlacedHit for a hit, PlacedHRW otherwise).
//
// With load awareness on (Config.Load) and spilling allowed (not load.disable_spill), the
// parent's backend must first pass the spill guard a hit on it would face, the prefix the
// child shares being the parent binding's reprefill estimate (its last reported prompt,
// at most this cost; with the drain model what the backend is expected to retain after
// the parent's idle time): the hint applies when that backend is idle, when its wait
// (its load without load.min_request_cost's floor) is at most spill_cost_weight x that
// prefix, or when it is under the bound, this request counted (the floor counted). Otherwise, and on a busy backend (any load above 0) when that prefix is 0 (the
// parent's last hit reported its cache lost, or with the drain model none of it is
// expected to be retained), the hint is declined: not counted anywhere, the call is
// exactly Acquire (the bounded-load walk along the child's own ranking, PlacedHRW; the
// child had no binding, so nothing is broken). Rule 21 of the package documentation
// states it. With load awareness off, or spill disabled, the parent placement does not
// look at load. Either way the child's later turns are Acquire's (they may spill).
//
// Errors: Acquire's (ErrInvalidLease, ErrInvalidCost and SelectBackend's). Safe for
// concurrent use (on different Leases); the parent's backend ID and reprefill inputs are
// read together under the parent's shard lock, and the loads the guard reads may change
// before the lease is taken, as for any placement. Cost: SelectBackendWithParent's plus
// the lease; with the guard, a clock read, a lock-free load-record lookup and the
// backend's load view (atomic loads), and only when that backend's wait
// exceeds spill_cost_weight x the prefix one bounded-load walk over the candidates
// (O(len(candidates)), as Acquire's); a declined hint then costs Acquire as well.
func (s *Scheduler) AcquireWithParent(sessionID, parentSessionID, tier string, candidates []Backend, cost int64, l *Lease) (Placement, error) {
	if l == nil || atomic.LoadUint32(&l.state)&leaseOpen != 0 || cost < 0 {
		return PlacedHRW, s.refuse(sessionID, tier, candidates, cost, l)
	}
	units := min(max(cost, 1), MaxLeaseCost)
	guard := int64(0) // placeWithParent's units: 0 = no spill guard
	if s.ld.p.on && s.ld.p.spill {
		guard = units
	}
	b, _, ok, err := s.placeWithParent(sessionID, parentSessionID, tier, candidates, guard)
	if err != nil {
		return PlacedHRW, err
	}
	if ok {
		l.session, l.tier = sessionID, tier
		s.open(l, &b, OutcomeMiss, grant{charge: units})
		return PlacedParent, nil
	}
	if err := s.Acquire(sessionID, tier, candidates, cost, l); err != nil {
		return PlacedHRW, err
	}
	if l.Outcome == OutcomeHit { // the caller cannot have changed it yet
		return PlacedHit, nil
	}
	return PlacedHRW, nil
}

// parentStays is the spill guard of a hit applied to the parent's backend candidates[pi]
// for a child's first turn of units prompt tokens: it reports whether the parent hint may
// place the turn there. pe is a copy of the parent's binding: the prefix the child shares
// is reprefill(pe, units), with the drain model the part of it the backend is expected to
// retain after the parent's idle time (the guard's reprefill of a hit on the parent's
// binding). As stays, the hint applies when the backend's wait v is 0 or at most
// spill_cost_weight x that prefix (O(1)). Past that a prefix of 0 declines (nothing warm
// to wait for: the child is placed as a new session is); otherwise the hint still applies
// when the backend is not over the bound, this request counted (a hit under the bound
// never spills; one walk, O(len(cands))), and is declined when it is over: the child is
// then placed by the bounded-load walk, so a flood of children cannot pile on the
// parent's backend beyond the bound and the guard's allowance.
func (s *Scheduler) parentStays(kh uint64, cands []Backend, pi int, pe *entry, units int64) bool {
	p := &s.ld.p
	now := s.t.clock.now()
	pb := &cands[pi].node
	bl := s.ld.loads.get(pb.ID(), pb.Hash())
	grp := reprefill(pe, units)
	if p.drainRate > 0 { // cache retention (drainmodel.go)
		grp, _ = bl.retainedPrefix(p, now-pe.lastUse, grp)
	}
	if bl.guardStays(p, now, grp) {
		return true
	}
	if grp == 0 {
		return false
	}
	over, err := s.walk(kh, cands, units, pi)
	return err == nil && !over.boundOver
}
