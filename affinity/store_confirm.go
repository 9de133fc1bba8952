package affinity

import (
	"context"
	"log/slog"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// flagProvisional (entry.lflags) marks a binding that a Scheduler with a store made
// without the store's answer: the store was skipped after an error, its call failed, or
// the binding was placed without asking it (a local spill or rebind while the store is
// skipped, a parent placement). Another replica may have bound the session elsewhere
// meanwhile, so the binding's next hit with the store usable asks it first (confirm).
// Never set without a store; snapshot restores and Table.Bind do not set it.
const flagProvisional uint8 = 1 << 7

// provisional returns the lflags of a binding decided locally: flagProvisional with a
// store, 0 without.
func (s *Scheduler) provisional() uint8 {
	if s.store != nil {
		return flagProvisional
	}
	return 0
}

// confirm asks the store whether the provisional binding of the session (key hash kh,
// tier) to cands[ci] is the fleet's, with one call bounded by the store timeout (two or
// more only when the shared binding is broken in this replica's view and another replica
// rebinds it meanwhile). It returns kept, the local backend's ID when the store now
// holds the local binding (claimed, already bound to it, or moved to it from a backend
// that is Down or not a candidate here: that move is counted and logged as consult's
// rebind is), or adopt = true and d, the fleet's binding to a usable candidate that
// replaces the local one (a hit; logged at Debug). Neither: the call failed (counted, the
// store is skipped) or the shared binding kept moving; the binding stays provisional and
// this turn is answered locally.
func (s *Scheduler) confirm(kh uint64, tier string, cands []Backend, ci int, ttl, now int64) (kept string, d decision, adopt bool) {
	ss := s.store
	key := StoreKey{Session: kh, Tier: hrw.KeyHash(tier)}
	ctx, cancel := context.WithTimeout(context.Background(), ss.timeout)
	defer cancel()
	local := cands[ci].node.ID()
	cur, claimed, err := ss.st.Claim(ctx, key, local, storeTTL(ttl))
	if err != nil {
		ss.fail(metrics.StoreOpClaim, now)
		return "", d, false
	}
	for range 3 { // each round: another replica rebound in between
		if claimed || cur == local {
			return local, d, false
		}
		fi, _ := findBackend(cands, premix(hrw.NodeHash(cur)), cur)
		if fi >= 0 && s.state(cur) != health.Down {
			if s.log != nil {
				s.log.LogAttrs(context.Background(), slog.LevelDebug, "affinity: provisional binding replaced by the fleet's",
					slog.String("tier", tier), slog.String("from", local), slog.String("to", cur))
			}
			return "", decision{idx: fi, hit: true}, true
		}
		reason := metrics.ReasonUnhealthy
		if fi < 0 {
			reason = metrics.ReasonNotCandidate
		}
		old := cur
		cur, claimed, err = ss.st.Rebind(ctx, key, old, local, storeTTL(ttl))
		if err != nil {
			ss.fail(metrics.StoreOpRebind, now)
			return "", d, false
		}
		if claimed { // moved the shared binding to ours: count it as consult does
			sh := s.t.shardFor(kh)
			sh.mu.Lock()
			sh.c.broken[reason]++
			sh.mu.Unlock()
			s.rec.Broken(tier, reason)
			if s.log != nil {
				s.log.LogAttrs(context.Background(), slog.LevelDebug, "affinity: broken shared binding rebound",
					slog.String("tier", tier), slog.String("reason", reason.String()),
					slog.String("from", old), slog.String("to", local))
			}
		}
	}
	if claimed || cur == local {
		return local, d, false
	}
	return "", d, false
}
