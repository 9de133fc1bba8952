package affinity

import (
	"strconv"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Placement says how [Scheduler.SelectBackendWithParent] chose the backend of a turn.
type Placement uint8

const (
	// PlacedHRW: an affinity miss placed by rendezvous hashing (the zero value; also the
	// value returned with an error).
	PlacedHRW Placement = iota
	// PlacedHit: an affinity hit, the backend of the session's own still-valid binding.
	PlacedHit
	// PlacedParent: an affinity miss placed on the backend of the parent session's
	// still-valid binding; the session now has its own binding there.
	PlacedParent
)

// String returns "hrw", "hit" or "parent" ("Placement(n)" otherwise).
func (p Placement) String() string {
	switch p {
	case PlacedHRW:
		return "hrw"
	case PlacedHit:
		return "hit"
	case PlacedParent:
		return "parent"
	}
	return "Placement(" + strconv.Itoa(int(p)) + ")"
}

// Hit reports whether p is [PlacedHit] (SelectBackend's affinityHit).
func (p Placement) Hit() bool { return p == PlacedHit }

// SelectBackendWithParent is [Scheduler.SelectBackend] with a placement hint for the
// first turn of a subagent session: when (sessionID, tier) has no valid binding of its
// own, and parentSessionID has a valid binding in the same tier whose backend is among
// candidates and eligible (Healthy; Draining only when no candidate is Healthy, as for
// HRW), the turn is placed there instead of on the HRW winner and returns
// [PlacedParent]. A subagent usually shares its parent's system prompt and tools, so the
// parent's backend already holds that prefix in its cache.
//
// Such a turn is an affinity miss (Stats.Misses, Recorder.Miss) with a distinct outcome:
// Stats.ParentPlaced, and ParentPlaced on a Recorder that implements
// metrics.ParentRecorder. From then on the session has its own binding and behaves
// exactly as under SelectBackend: later turns are hits whatever happens to the parent,
// and if its binding breaks it is rebound by HRW, not by the hint.
//
// The hint never changes a hit, never extends the parent's TTL (the parent's binding is
// read as by [Scheduler.Lookup]), and is ignored — the turn is placed by HRW, as
// SelectBackend would — when parentSessionID is empty, equal to sessionID, longer than
// the maximum session ID length, unbound, expired, bound to a backend that is not a
// candidate or not eligible, or when affinity is disabled for the tier. An invalid
// parent ID is not an error, since it usually comes from a client header. Errors are
// SelectBackend's, for sessionID, tier and candidates.
//
// With parentSessionID == "" the result equals SelectBackend's (Placement.Hit() ==
// affinityHit). Concurrency: as SelectBackend; concurrent first turns of one session
// still produce one binding and one miss. The parent's binding is read before the
// session's shard is locked, so a parent rebound at the same moment may place the child
// on the parent's previous backend. Cost with a parent ID: one read-only lookup of the
// session's own binding (a hash and a shard lock) before SelectBackend on later turns;
// on a first turn one lookup of the parent's binding, an O(len(candidates)) ID scan, one
// health read (plus one per candidate when the parent's backend is Draining), one shard lock
// and the stored key's allocation. Without a parent ID it is exactly SelectBackend.
func (s *Scheduler) SelectBackendWithParent(sessionID, parentSessionID, tier string, candidates []Backend) (Backend, Placement, error) {
	if b, p, ok, err := s.placeWithParent(sessionID, parentSessionID, tier, candidates, 0); ok || err != nil {
		return b, p, err
	}
	b, hit, err := s.SelectBackend(sessionID, tier, candidates)
	if hit {
		return b, PlacedHit, err
	}
	return b, PlacedHRW, err
}

// placeWithParent binds a first turn to the parent's backend when the hint applies and
// reports ok; ok == false (and no error) means "decide as SelectBackend": no parent, a
// valid binding of the session's own (hit or broken), affinity off, an ineligible
// parent, or a race lost to a concurrent change (the caller's SelectBackend then sees
// the new state). It lives beside SelectBackend rather than inside it so the hot path
// stays untouched; it uses the same table primitives and the same bind/drop re-check.
//
// units > 0 (AcquireWithParent's request cost, load awareness on and spill enabled) puts
// the parent's backend through the spill guard of a hit first (parentStays): a hint the
// guard refuses is declined, ok == false, and the caller decides as Acquire.
func (s *Scheduler) placeWithParent(sessionID, parent, tier string, cands []Backend, units int64) (Backend, Placement, bool, error) {
	if parent == "" || parent == sessionID {
		return Backend{}, PlacedHRW, false, nil
	}
	if err := s.validate(sessionID, tier, cands); err != nil {
		return Backend{}, PlacedHRW, false, err
	}
	t := s.t
	cls, enabled := t.classOf(tier)
	if !enabled {
		return Backend{}, PlacedHRW, false, nil
	}
	if _, own := t.Get(sessionID, tier); own { // later turns: SelectBackend's rules
		return Backend{}, PlacedHRW, false, nil
	}
	kh := hrw.KeyHash(sessionID)
	pi, pst, pe, ok := s.parentBackend(tier, cands, parent)
	if !ok || (units > 0 && !s.parentStays(kh, cands, pi, &pe, units)) {
		return Backend{}, PlacedHRW, false, nil
	}
	pb := &cands[pi].node
	sh := t.shardFor(kh)
	now := t.clock.now()
	sh.mu.Lock()
	i := sh.idx.find(sh, uint32(kh), tier, sessionID)
	if i != 0 && now-sh.at(i).lastUse < t.ttls[sh.at(i).class] {
		sh.mu.Unlock() // a concurrent first turn bound it: SelectBackend finds it (a hit)
		return Backend{}, PlacedHRW, false, nil
	}
	// Re-check the parent's backend under the lock that inserts, as SelectBackend does
	// for its winner: OnBackendDown marks Down before it drops bindings shard by shard.
	if s.state(pb.ID()) != pst {
		sh.mu.Unlock()
		return Backend{}, PlacedHRW, false, nil
	}
	if i != 0 {
		sh.remove(i)
		sh.c.expired++
	}
	evTier, ev := sh.insert(t, uint32(kh), tier, sessionID, cls, pb.ID(), cands[pi].pre, now, s.provisional())
	sh.c.misses++
	sh.c.parentPlaced++
	sh.mu.Unlock()
	if ev {
		s.rec.Evicted(evTier)
	}
	s.rec.Miss(tier)
	if pr, ok := s.rec.(metrics.ParentRecorder); ok {
		pr.ParentPlaced(tier)
	}
	return cands[pi], PlacedParent, true, nil
}

// parentBackend returns the index and state of the candidate the parent session is
// validly bound to, if it is eligible (Healthy; Draining only when no candidate is
// Healthy), and a copy of the parent's binding (its load fields and lastUse, for the
// spill guard of AcquireWithParent). A zero Backend among the candidates makes it
// decline, so that SelectBackend reports ErrInvalidBackend.
func (s *Scheduler) parentBackend(tier string, cands []Backend, parent string) (int, health.State, entry, bool) {
	id, pe, ok := s.t.binding(parent, tier)
	if !ok {
		return 0, 0, entry{}, false
	}
	i := -1
	for j := range cands {
		if isZero(&cands[j]) {
			return 0, 0, entry{}, false
		}
		if i < 0 && cands[j].node.ID() == id {
			i = j
		}
	}
	if i < 0 {
		return 0, 0, entry{}, false
	}
	switch st := s.state(id); st {
	case health.Healthy:
		return i, st, pe, true
	case health.Draining: // eligible only when no candidate is Healthy, as for HRW
		for j := range cands {
			if s.state(cands[j].node.ID()) == health.Healthy {
				return 0, 0, entry{}, false
			}
		}
		return i, st, pe, true
	}
	return 0, 0, entry{}, false
}

// binding is Get that also returns a copy of the binding's entry, read under its shard's
// lock with the backend ID (so the two agree): what the parent hint needs of the parent's
// binding. The copy's key and list links are not to be used. Cost: Get's.
func (t *Table) binding(sessionID, tier string) (string, entry, bool) {
	return t.get(sessionID, tier, false)
}
