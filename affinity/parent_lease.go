package affinity

import "fmt"

// AcquireWithParent is [Scheduler.Acquire] with the parent-session placement hint of
// [Scheduler.SelectBackendWithParent]: when the hint applies (a first turn, the parent
// validly bound to an eligible candidate in the same tier) the turn is bound to the
// parent's backend, counted as a miss and as Stats.ParentPlaced, and leased there
// (Lease.Outcome OutcomeMiss, AffinityHit false) with cost as Acquire would; otherwise
// the call is exactly Acquire (Placement PlacedHit for a hit, PlacedHRW otherwise).
//
// The parent placement does not apply the load bound: a subagent's first turn follows
// its parent's warm cache even onto a loaded backend; its later turns are Acquire's
// (they may spill). Errors: Acquire's (ErrInvalidCost and SelectBackend's). Safe for
// concurrent use; cost as SelectBackendWithParent plus the lease.
func (s *Scheduler) AcquireWithParent(sessionID, parentSessionID, tier string, candidates []Backend, cost int64) (Lease, Placement, error) {
	if cost < 0 {
		return Lease{}, PlacedHRW, fmt.Errorf("%w: %d is negative", ErrInvalidCost, cost)
	}
	b, _, ok, err := s.placeWithParent(sessionID, parentSessionID, tier, candidates)
	if err != nil {
		return Lease{}, PlacedHRW, err
	}
	if ok {
		units := min(max(cost, 1), MaxLeaseCost)
		l := Lease{Backend: b, Outcome: OutcomeMiss}
		l.rec, l.gen = s.open(&b, grant{charge: units}, false, sessionID, tier)
		return l, PlacedParent, nil
	}
	l, err := s.Acquire(sessionID, tier, candidates, cost)
	if l.AffinityHit {
		return l, PlacedHit, err
	}
	return l, PlacedHRW, err
}
