package affinity

import (
	"context"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// casSpill makes the spill of a session bound to old (overloaded) to candidates[w] a
// compare-and-set in the shared store, so that replicas spilling one session at once
// agree: if another replica moved it first, its choice is adopted (a hit). ok=false only
// when the store failed (counted; the store is then skipped and the spill decided
// locally).
func (s *Scheduler) casSpill(kh uint64, tier string, cands []Backend, old string, w int, ttl, now int64) (decision, bool) {
	ss := s.store
	if ss.skipUntil.Load() > now {
		return decision{}, false
	}
	key := StoreKey{Session: kh, Tier: hrw.KeyHash(tier)}
	ctx, cancel := context.WithTimeout(context.Background(), ss.timeout)
	defer cancel()
	spill := decision{idx: w, reason: metrics.ReasonOverloaded, from: old}
	for range 2 {
		cur, rebound, err := ss.st.Rebind(ctx, key, old, cands[w].node.ID(), storeTTL(ttl))
		if err != nil {
			ss.fail(metrics.StoreOpRebind, now)
			return decision{}, false
		}
		if rebound {
			return spill, true
		}
		if ci, _ := findBackend(cands, premix(hrw.NodeHash(cur)), cur); ci >= 0 && s.state(cur) != health.Down {
			return decision{idx: ci, hit: true}, true
		}
		old = cur // moved to a backend this replica cannot use: take it over
	}
	return spill, true
}

// storeUsable reports whether a store is configured and not skipped after an error.
func (s *Scheduler) storeUsable(now int64) bool {
	return s.store != nil && s.store.skipUntil.Load() <= now
}

// outcome is the Lease outcome of a store decision.
func (d decision) outcome() Outcome {
	switch {
	case d.hit:
		return OutcomeHit
	case d.reason == metrics.ReasonOverloaded:
		return OutcomeSpill
	case d.reason != 0:
		return OutcomeRebind
	}
	return OutcomeMiss
}
