package affinity

import "sync/atomic"

// AcquireWithParent is [Scheduler.Acquire] with the parent-session placement hint of
// [Scheduler.SelectBackendWithParent]: when the hint applies (a first turn, the parent
// validly bound to an eligible candidate in the same tier) the turn is bound to the
// parent's backend, counted as a miss and as Stats.ParentPlaced, and leased there into l
// (Lease.Outcome OutcomeMiss, AffinityHit false) with cost as Acquire would; otherwise
// the call is exactly Acquire (Placement PlacedHit for a hit, PlacedHRW otherwise).
//
// The parent placement does not apply the load bound: a subagent's first turn follows
// its parent's warm cache even onto a loaded backend; its later turns are Acquire's
// (they may spill). Errors: Acquire's (ErrInvalidLease, ErrInvalidCost and
// SelectBackend's). Safe for concurrent use (on different Leases); cost as
// SelectBackendWithParent plus the lease.
func (s *Scheduler) AcquireWithParent(sessionID, parentSessionID, tier string, candidates []Backend, cost int64, l *Lease) (Placement, error) {
	if l == nil || atomic.LoadUint32(&l.state)&leaseOpen != 0 || cost < 0 {
		return PlacedHRW, s.refuse(sessionID, tier, candidates, cost, l)
	}
	b, _, ok, err := s.placeWithParent(sessionID, parentSessionID, tier, candidates)
	if err != nil {
		return PlacedHRW, err
	}
	if ok {
		units := min(max(cost, 1), MaxLeaseCost)
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
