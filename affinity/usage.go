package affinity

import "github.com/agentserve/sessionaffinity/hrw"

// What a lease's Done learns from the usage the backend reported: the binding's prompt
// size and lost-cache flag (rules 14 and 17), the tier's achieved reuse (rule 20) and the
// drain model's samples (rules 14b-14c, drainmodel.go).

// DoneInfo is what the caller knows when a leased request ends. Every field is optional;
// the zero value means "ended, nothing reported".
type DoneInfo struct {
	// PromptTokens is usage.prompt_tokens of the response (0: not reported).
	PromptTokens int64
	// CachedPromptTokens is usage.prompt_tokens_details.cached_tokens: the prompt tokens
	// the backend served from its prefix cache. A value > 0 is a report by itself; 0 is
	// one only with CacheReported; a negative value is never one (no count). A count
	// above PromptTokens is taken as PromptTokens.
	CachedPromptTokens int64
	// CacheReported says the backend reported its cached prompt tokens (the usage object
	// had prompt_tokens_details.cached_tokens), so a CachedPromptTokens of 0 means the
	// cache served nothing. false with CachedPromptTokens 0 means not reported: vLLM
	// without --enable-prompt-tokens-details (its default) omits the details or sends
	// null, Dynamo omits them on a miss. An unreported count is unknown, not a lost cache:
	// it never marks the binding's cache lost (the spill guard's reprefill 0), is not
	// counted in the achieved reuse, and teaches the drain model nothing about cache
	// retention (the package documentation, rules 14b, 14c, 17 and 20).
	CacheReported bool
	// CompletionTokens is usage.completion_tokens (kept for symmetry with the usage
	// object; not used to decide).
	CompletionTokens int64
	// Err is the request's error, if any (nil: success). A failed request's usage is
	// ignored.
	Err error
}

// cachedUnknown is learn's cached argument when the backend did not report its cached
// prompt tokens (any negative count means that).
const cachedUnknown = -1

// learn is the rest of a Lease's first Done: the drain model learns from the request and
// the reported usage (prompt > 0; cached as reported, or cachedUnknown) is recorded.
func (s *Scheduler) learn(l *Lease, st uint32, prompt, cached int64) {
	bl, hit := l.bl, st&leaseHit != 0
	if st&leaseDrain != 0 { // drainmodel.go
		s.learnDrain(bl, l.start, l.cost, prompt, cached)
		if l.rp > 0 && prompt > 0 && cached >= 0 { // an unreported count is no eviction
			bl.learnRetention(&s.ld.p, l.idle, l.rp, cached)
		}
	}
	if prompt <= 0 {
		return
	}
	if cached >= 0 {
		cached = min(cached, prompt)
	}
	if s.ld.p.on && l.session != "" { // LeaseBackend's leases have no binding
		s.noteUsage(l.session, l.tier, bl, hit, prompt, cached)
	}
	if hit && cached >= 0 { // unreported reuse is unknown, not 0 %
		s.ld.usage.add(l.tier, prompt, cached)
		if s.ld.urec != nil {
			s.ld.urec.Usage(l.tier, prompt, cached)
		}
	}
}

// Binding load flags (entry.lflags).
const (
	flagKnown uint8 = 1 << iota // lprompt holds the last reported prompt size
	flagCold                    // the last hit reported (almost) no cached tokens (never set by an unreported count)
)

// promptUnit is the granularity of entry.lprompt in tokens.
const promptUnit = 64

// noteUsage stores the reported prompt size and the cold flag in the session's binding if
// it is still bound to the lease's backend. cached is cachedUnknown when not reported:
// the flag is then cleared, as after a miss (it describes the last turn, and an unknown
// count is no evidence of a lost cache).
func (s *Scheduler) noteUsage(session, tier string, bl *backendLoad, hit bool, prompt, cached int64) {
	kh := hrw.KeyHash(session)
	sh := s.t.shardFor(kh)
	sh.mu.Lock()
	if i := sh.idx.find(sh, uint32(kh), tier, session); i != 0 {
		e := sh.at(i)
		if sh.idOf(e.slot) == bl.id {
			e.lprompt = uint16((min(prompt, (1<<16-1)*promptUnit) + promptUnit - 1) / promptUnit) // no overflow for any prompt
			e.lflags |= flagKnown
			if hit && cached >= 0 && float64(cached) <= s.ld.p.coldRatio*float64(prompt) { // full precision, no overflow
				e.lflags |= flagCold
			} else {
				e.lflags &^= flagCold
			}
		}
	}
	sh.mu.Unlock()
}

// reprefill estimates the prompt tokens a move of binding e throws away: 0 if its last hit
// found the cache lost, else min(last reported prompt tokens, units), else units.
func reprefill(e *entry, units int64) int64 {
	switch {
	case e.lflags&flagCold != 0:
		return 0
	case e.lflags&flagKnown != 0:
		return min(int64(e.lprompt)*promptUnit, units)
	}
	return units
}
