package affinity

import (
	"context"
	"log/slog"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// decide is the one routing decision behind SelectBackend and Acquire. aware turns load
// awareness on for this call (Acquire with Config.Load set); units is the request's cost
// in prompt tokens: at least 1 from Acquire, 0 from SelectBackend (no lease: no load
// record is looked up, and none is read to decide unless aware).
// It returns the chosen candidate's index, the outcome (affinityHit is Outcome ==
// OutcomeHit), the chosen backend's load record when the decision read it (else nil) and
// the prompt tokens to lease (units, or less on a warm hit); all in registers.
// With aware false it is exactly SelectBackend's decision: the binding's backend on a
// hit, the HRW winner on a miss, nothing read of load. The arguments must have passed
// validate.
//
// The hit path comes first and touches, under one shard lock: the index slot, the entry,
// its backend's slot, the candidates (findBackend) and the entry's lastUse (touch). A miss
// computes its placement outside the lock and decides again under it (the bind/drop
// re-check, see the package documentation), so nothing changes before the call is known
// to succeed.
func (s *Scheduler) decide(sessionID, tier string, cands []Backend, aware bool, units int64) (int, Outcome, grant, error) {
	t := s.t
	kh := hrw.KeyHash(sessionID)
	sh := t.shardFor(kh)
	if t.someDisabled && !t.enabled(tier) { // TTL 0: the (bounded-load) HRW winner, nothing stored
		pl, err := s.placeNew(kh, cands, aware, units)
		if err != nil {
			return -1, 0, grant{}, err
		}
		sh.mu.Lock()
		sh.c.misses++
		sh.mu.Unlock()
		s.rec.Miss(tier)
		return pl.w, OutcomeMiss, grant{bl: pl.bl, charge: units}, nil
	}

	now := t.clock.now()
	sh.mu.Lock()
	i := sh.idx.find(sh, uint32(kh), tier, sessionID)
	if i != 0 { // the hit path: what most calls of a busy gateway take
		e := sh.at(i)
		// else: not filled, or provisional (a store was configured but not asked: confirm it)
		if now-e.lastUse < t.ttls[e.class] && int(e.slot) < len(sh.slots) && e.lflags&flagProvisional == 0 {
			slot := &sh.slots[e.slot]
			ci, bad := findSlot(cands, slot)
			if bad < 0 && ci >= 0 && s.slotState(slot) != health.Down {
				g, stay := grant{charge: units}, true
				if units > 0 { // Acquire: the lease needs the backend's load record
					g.bl = s.loadOf(slot)
				}
				if aware {
					// A busy backend: the full guard (the walk); a real spill is rare and
					// left to decideLocked, which decides it again under this lock.
					var grp int64
					if g, grp, stay = s.stays(e, slot, units, now); !stay {
						stay = s.spillTarget(kh, cands, ci, g.bl, units, grp).w < 0
					}
				}
				if stay {
					s.honour(sh, i, e, kh, tier, slot.id, now)
					return ci, OutcomeHit, g, nil
				}
			}
		}
	}
	// The TTL class of a new binding, looked up only now: with tier overrides it is a map
	// lookup that a hit does not need (it reads the binding's own class).
	cls, _ := t.classOf(tier)
	return s.decideLocked(sh, i, kh, tier, sessionID, cls, cands, aware, units, now)
}

// grant is what Acquire needs to lease a decision: the chosen backend's load record
// (nil when the decision did not read it), the prompt tokens to charge, and for a hit
// under the drain model its binding's idle time (ns) and expected cached prefix (tokens;
// see drainmodel.go). A small struct returned in registers.
type grant struct {
	bl       *backendLoad
	charge   int64
	idle, rp int64
}

// stays is the first half of the spill guard on a hit whose backend (slot) is a healthy
// candidate, at clock reading now. It returns the lease grant (the charge of a hit on a
// warm backend is only the prompt beyond the prefix expected cached, rule 14; with the
// drain model that prefix is what the backend's learned retention keeps after the
// binding's idle time), grp, the guard's reprefill estimate, and stay = true when the
// binding stays without looking at other candidates: spill is disabled, or the backend's
// wait (its load without min_request_cost's floor and the drain model's per-request
// time) is at most spill_cost_weight x grp (the guard needs wait(bound) - wait(target)
// > w x grp with wait(target) >= 0), or grp is 0 and the backend is idle (an idle
// backend is never overloaded): guardStays. O(1): the backend's load record (cached in
// its slot) and its atomics.
func (s *Scheduler) stays(e *entry, slot *backendSlot, units, now int64) (g grant, grp int64, stay bool) {
	bl := s.loadOf(slot)
	rp := reprefill(e, units)
	grp, kept := rp, rp
	if s.ld.p.drainRate > 0 { // cache retention (drainmodel.go)
		g.idle = now - e.lastUse
		if e.lflags&flagKnown != 0 { // learnRetention's evidence: a reported prompt size only
			g.rp = rp
		}
		grp, kept = bl.retainedPrefix(&s.ld.p, g.idle, rp)
	}
	stay = !s.ld.p.spill || bl.guardStays(&s.ld.p, now, grp)
	g.bl, g.charge = bl, max(units-kept, 1)
	return g, grp, stay
}

// loadOf returns the load record of the slot's backend, cached in the slot (the shard's
// lock is held; load records are never removed, so the pointer stays valid).
func (s *Scheduler) loadOf(slot *backendSlot) *backendLoad {
	if bl := slot.bl; bl != nil { // small enough to inline: the hit path takes this
		return bl
	}
	return s.cacheLoad(slot)
}

// cacheLoad is loadOf's first call on a slot: it looks the load record up and caches it.
func (s *Scheduler) cacheLoad(slot *backendSlot) *backendLoad {
	slot.bl = s.ld.loads.get(slot.id, unpremix(slot.pre))
	return slot.bl
}

// honour completes a hit on binding i (entry e, bound to boundID) of shard sh, which the
// caller has locked: it extends the TTL (touch), counts the hit, unlocks, then queues the
// store refresh when due and reports the hit to the Recorder.
func (s *Scheduler) honour(sh *shard, i uint32, e *entry, kh uint64, tier, boundID string, now int64) {
	ttl := s.t.ttls[e.class]
	refresh := s.store != nil && s.store.refreshDue(kh, e.lastUse, now, ttl)
	sh.touch(i, e, now)
	sh.c.hits++
	sh.mu.Unlock()
	if refresh {
		s.refresh(kh, tier, boundID, ttl)
	}
	s.rec.Hit(tier)
}

// decideLocked is decide beyond the fast hit: broken and expired bindings, misses, spills,
// the shared store and a provisional binding's confirmation (store_confirm.go). Called with sh locked and i the binding's entry (0: none).
func (s *Scheduler) decideLocked(sh *shard, i uint32, kh uint64, tier, sessionID string, cls uint8, cands []Backend, aware bool, units int64, now int64) (int, Outcome, grant, error) {
	t := s.t
	pl := placement{w: -1, st: health.Healthy}
	var d decision
	consulted := false // d holds the shared store's decision (store.go, store_lease.go)
	tried := false     // a provisional binding's confirm ran (store_confirm.go)
	kept := ""         // the backend it kept in the store
	for locked := true; ; locked = false {
		if !locked {
			sh.mu.Lock()
			i = sh.idx.find(sh, uint32(kh), tier, sessionID)
		}
		found := i != 0
		var reason metrics.Reason
		var boundID string
		spill := placement{w: -1}
		if found && !consulted {
			e := sh.at(i)
			if now-e.lastUse < t.ttls[e.class] {
				slot := sh.fill(e.slot)
				boundID = slot.id
				ci, bad := findSlot(cands, slot)
				switch {
				case bad >= 0:
					sh.mu.Unlock()
					return -1, 0, grant{}, invalidCandidate(bad)
				case ci < 0:
					reason = metrics.ReasonNotCandidate
				case s.slotState(slot) == health.Down:
					reason = metrics.ReasonUnhealthy
				case e.lflags&flagProvisional != 0 && kept == boundID:
					e.lflags &^= flagProvisional // the store holds it now: decide as a hit
					fallthrough
				case e.lflags&flagProvisional == 0 || tried || !s.storeUsable(now):
					g, stay := grant{bl: s.loadOf(slot), charge: units}, true
					if aware {
						var grp int64
						if g, grp, stay = s.stays(e, slot, units, now); !stay {
							spill = s.spillTarget(kh, cands, ci, g.bl, units, grp)
						}
					}
					if spill.w < 0 { // hit (also the losers of concurrent first turns)
						s.honour(sh, i, e, kh, tier, boundID, now)
						return ci, OutcomeHit, g, nil
					}
					reason = metrics.ReasonOverloaded
					pl = spill
					if s.storeUsable(now) { // the spill is a compare-and-set in the store
						ttl := t.ttls[e.class]
						sh.mu.Unlock()
						d, consulted = s.casSpill(kh, tier, cands, boundID, spill.w, ttl, now)
						continue
					}
				default: // provisional and the store usable: ask it before answering
					ttl := t.ttls[e.class]
					sh.mu.Unlock()
					tried = true
					var adopt bool
					if kept, d, adopt = s.confirm(kh, tier, cands, ci, ttl, now); adopt {
						pl.w, consulted = d.idx, true // the fleet's binding (a hit)
					}
					continue
				}
			}
		}
		if pl.w < 0 {
			// Compute the placement outside the lock, then decide again: nothing is
			// changed before we know the call succeeds.
			sh.mu.Unlock()
			// placeNew, written out: a placement is too large for registers, and returning
			// one through another call costs a copy through the stack.
			var err error
			if aware {
				pl, err = s.walk(kh, cands, units, -1)
			} else {
				pl = placement{}
				pl.w, pl.st, err = s.pick(kh, cands)
			}
			if err != nil {
				return -1, 0, grant{}, err
			}
			if s.store != nil {
				d, consulted = s.consult(kh, tier, cands, pl.w, t.ttls[cls], now)
			}
			continue
		}
		if consulted {
			if s.state(cands[d.idx].node.ID()) == health.Down {
				sh.mu.Unlock()
				pl.w, consulted = -1, false
				continue
			}
			var bl *backendLoad
			if d.idx == pl.w {
				bl = pl.bl
			}
			s.bindDecided(sh, i, kh, tier, sessionID, cls, cands, d, now)
			return d.idx, d.outcome(), grant{bl: bl, charge: units}, nil
		}
		// Re-check the placement under the lock that inserts: OnBackendDown marks Down
		// before it drops bindings shard by shard under each shard's lock, so either it
		// sees this binding or we see Down here.
		if s.state(cands[pl.w].node.ID()) != pl.st {
			sh.mu.Unlock()
			pl.w = -1
			continue
		}
		if found {
			sh.remove(i)
			if reason != 0 {
				sh.c.broken[reason]++
			} else {
				sh.c.expired++
			}
		}
		wb := &cands[pl.w].node
		evTier, ev := sh.insert(t, uint32(kh), tier, sessionID, cls, wb.ID(), cands[pl.w].pre, now, s.provisional())
		sh.c.misses++
		sh.mu.Unlock()
		out := OutcomeMiss
		if reason != 0 {
			out = OutcomeRebind
			if reason == metrics.ReasonOverloaded {
				out = OutcomeSpill
			}
			s.rec.Broken(tier, reason)
			if s.log != nil {
				attrs := []slog.Attr{slog.String("tier", tier), slog.String("reason", reason.String()),
					slog.String("from", boundID), slog.String("to", wb.ID())}
				if reason == metrics.ReasonOverloaded {
					attrs = append(attrs, slog.Int64("wait_from", spill.boundLoad), slog.Int64("wait_to", spill.load))
				}
				s.log.LogAttrs(context.Background(), slog.LevelDebug, "affinity: broken binding rebound", attrs...)
			}
		}
		if ev {
			s.rec.Evicted(evTier)
		}
		s.rec.Miss(tier)
		return pl.w, out, grant{bl: pl.bl, charge: units}, nil
	}
}

// placeNew places a new (or rebound) session: the HRW winner over the eligible
// candidates (pick) unless aware, else the bounded-load walk.
func (s *Scheduler) placeNew(kh uint64, cands []Backend, aware bool, units int64) (placement, error) {
	if !aware {
		w, st, err := s.pick(kh, cands)
		return placement{w: w, st: st}, err
	}
	return s.walk(kh, cands, units, -1)
}
