package affinity

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Outcome says how [Scheduler.Acquire] placed a request, for logs and response headers.
// The zero value is not a valid Outcome.
type Outcome uint8

const (
	// OutcomeHit: the session's still-valid binding was honoured (AffinityHit is true).
	OutcomeHit Outcome = iota + 1
	// OutcomeMiss: no valid binding (new session, expired binding, or affinity disabled
	// for the tier): placed along the session's HRW ranking and bound.
	OutcomeMiss
	// OutcomeRebind: a binding within its TTL could not be honoured (its backend Down,
	// unhealthy or not a candidate), was counted broken with that reason and rebound.
	OutcomeRebind
	// OutcomeSpill: the binding's backend was overloaded and the spill guard moved the
	// session along its own HRW ranking, counted as broken{reason="overloaded"}.
	OutcomeSpill
)

// String returns "hit", "miss", "rebind" or "spill" ("Outcome(n)" if invalid).
func (o Outcome) String() string {
	switch o {
	case OutcomeHit:
		return "hit"
	case OutcomeMiss:
		return "miss"
	case OutcomeRebind:
		return "rebind"
	case OutcomeSpill:
		return "spill"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// DoneInfo is what the caller knows when a leased request ends. Every field is optional;
// the zero value means "ended, nothing reported".
type DoneInfo struct {
	// PromptTokens is usage.prompt_tokens of the response (0: not reported).
	PromptTokens int64
	// CachedPromptTokens is usage.prompt_tokens_details.cached_tokens: the prompt tokens
	// the backend served from its prefix cache.
	CachedPromptTokens int64
	// CompletionTokens is usage.completion_tokens (kept for symmetry with the usage
	// object; not used to decide).
	CompletionTokens int64
	// Err is the request's error, if any (nil: success). A failed request's usage is
	// ignored.
	Err error
}

// Lease is one request placed by [Scheduler.Acquire]: the backend to forward to, the
// affinity-hit flag and the outcome, and the request's share of that backend's
// outstanding load until [Lease.Done]. It is a small value: copy it freely; Done on any
// copy releases the load once. The zero Lease is valid and its Done does nothing.
//
// Modelled on grpc-go's balancer.PickResult.Done: the picker decides and accounts, the
// caller reports the end.
type Lease struct {
	// Backend is the caller's candidate value to forward the request to.
	Backend Backend
	// AffinityHit is true exactly when SelectBackend would have reported a hit: the
	// backend of the session's still-valid binding served this turn.
	AffinityHit bool
	// Outcome is hit, miss, rebind or spill.
	Outcome Outcome

	rec *leaseRec
	gen uint64
}

// leaseRec is the shared state behind the copies of one Lease, recycled through a
// sync.Pool. gen advances on every Done, so a late Done with an old generation finds a
// different number and does nothing, even if the record was reused meanwhile.
type leaseRec struct {
	gen     atomic.Uint64
	s       *Scheduler
	bl      *backendLoad
	cost    int64
	start   int64 // clock reading at Acquire (drain model only)
	idle    int64 // a hit's time since its binding's previous use, ns (drain model only)
	rp      int64 // a hit's expected cached prefix, tokens (drain model only; 0: not a hit)
	session string
	tier    string
	hit     bool
}

// Done releases the lease: the request no longer counts in its backend's outstanding
// load. Only the first Done of a lease (over all its copies) counts; later calls, and
// Done on the zero Lease, do nothing. Safe from any goroutine, also after
// OnBackendDown(Backend.ID()) (the load is released; bindings are unaffected).
//
// When info reports usage (PromptTokens > 0) and no error: an affinity hit adds its
// prompt and cached prompt tokens to the tier's achieved reuse ([Scheduler.Reuse], and
// metrics.UsageRecorder if the Recorder implements it); with load awareness on, the
// session's binding remembers the prompt size and whether the cache was lost (cached /
// prompt <= cold_cache_ratio), which the spill guard uses.
//
// Cost: one compare-and-swap and one atomic add, 0 allocs; with usage and load awareness
// on, one xxh3 hash of the session ID and one shard lock; with the drain model
// (load.drain_tokens_per_second) also a clock read and a short per-backend lock.
func (l Lease) Done(info DoneInfo) {
	r := l.rec
	if r == nil || !r.gen.CompareAndSwap(l.gen, l.gen+1) {
		return
	}
	s, bl, cost, session, tier, hit := r.s, r.bl, r.cost, r.session, r.tier, r.hit
	r.bl, r.session, r.tier = nil, "", ""
	start, idle, rp := r.start, r.idle, r.rp
	r.idle, r.rp = 0, 0
	s.ld.leases.Put(r)
	bl.sub(cost)
	if s.ld.p.drainRate > 0 { // the drain model learns (drainmodel.go)
		s.learnDrain(bl, start, cost, info)
		if rp > 0 && info.Err == nil && info.PromptTokens > 0 {
			bl.learnRetention(&s.ld.p, idle, rp, info.CachedPromptTokens)
		}
	}
	if info.Err != nil || info.PromptTokens <= 0 {
		return
	}
	prompt := info.PromptTokens
	cached := min(max(info.CachedPromptTokens, 0), prompt)
	if s.ld.p.on {
		s.noteUsage(session, tier, bl, hit, prompt, cached)
	}
	if hit {
		s.ld.usage.add(tier, prompt, cached)
		if s.ld.urec != nil {
			s.ld.urec.Usage(tier, prompt, cached)
		}
	}
}

// Binding load flags (entry.lflags).
const (
	flagKnown uint8 = 1 << iota // lprompt holds the last reported prompt size
	flagCold                    // the last hit reported (almost) no cached tokens
)

// promptUnit is the granularity of entry.lprompt in tokens.
const promptUnit = 64

// loadState is the Scheduler's load-awareness state.
type loadState struct {
	p       loadParams
	loads   loadTable
	usage   usageTable
	leases  sync.Pool // *leaseRec
	scratch sync.Pool // *walkScratch, walks over more than walkInline candidates
	cands   candCache // load records of recently walked candidate lists (candcache.go)
	urec    metrics.UsageRecorder
}

func newLoadState(p loadParams, rec metrics.Recorder) *loadState {
	ld := &loadState{p: p}
	ld.urec, _ = rec.(metrics.UsageRecorder)
	return ld
}

func hashID(id string) uint64 { return hrw.NodeHash(id) }

// noteUsage stores the reported prompt size and the cold flag in the session's binding if
// it is still bound to the lease's backend.
func (s *Scheduler) noteUsage(session, tier string, bl *backendLoad, hit bool, prompt, cached int64) {
	kh := hrw.KeyHash(session)
	sh := s.t.shardFor(kh)
	sh.mu.Lock()
	if i := sh.idx.find(sh, uint32(kh), tier, session); i != 0 {
		e := sh.at(i)
		if sh.slots[e.slot].id == bl.id {
			e.lprompt = uint16((min(prompt, (1<<16-1)*promptUnit) + promptUnit - 1) / promptUnit) // no overflow for any prompt
			e.lflags |= flagKnown
			if hit && float64(cached) <= s.ld.p.coldRatio*float64(prompt) { // full precision, no overflow
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

// open accounts a lease of g.charge prompt tokens on backend b (whose load record is
// g.bl, or nil to look it up) and returns its record and generation.
func (s *Scheduler) open(b *Backend, g grant, hit bool, session, tier string) (*leaseRec, uint64) {
	bl := g.bl
	if bl == nil {
		bl = s.ld.loads.get(b.node.ID(), b.node.Hash())
	}
	bl.add(g.charge)
	r, ok := s.ld.leases.Get().(*leaseRec)
	if !ok {
		r = &leaseRec{s: s}
	}
	if s.ld.p.drainRate > 0 { // drainmodel.go
		r.start = s.t.clock.now()
		bl.charge(&s.ld.p, r.start, g.charge)
		r.idle, r.rp = g.idle, g.rp
	}
	r.bl, r.cost, r.session, r.tier, r.hit = bl, g.charge, session, tier, hit
	return r, r.gen.Load()
}

// Acquire decides like SelectBackend and leases the request: the chosen backend's
// outstanding load grows by one request and by cost until [Lease.Done]. cost is the
// request's estimated prefill work in prompt tokens (body bytes / 4, or the previous
// turn's usage); 0 counts as 1, more than MaxLeaseCost as MaxLeaseCost, negative is
// ErrInvalidCost.
//
// With load awareness off (Config.Load absent) the decision is exactly SelectBackend's:
// both run the same decision code, which then reads no load.
// With it on, a miss walks the session's HRW ranking over the eligible candidates and
// takes the first backend whose load, this request counted, is within balance_factor x
// the mean; a hit whose backend is over that bound moves (a spill) when the spill guard
// allows it. The package documentation ("Load awareness") states the rules.
//
// Errors: those of SelectBackend, and ErrInvalidCost; nothing is stored, counted or
// leased then. Safe for concurrent use. Cost: SelectBackend's plus one atomic add and a
// pooled lease record (0 allocs in the steady state); with load awareness on, a hit reads
// its own backend's load only, unless that backend's wait exceeds spill_cost_weight x
// reprefill (only then can the guard let it spill); such a hit and every miss read the
// load of each candidate (O(len(candidates)) atomic loads; the load records of a list of
// candidates seen recently come from one remembered array, others from lock-free map
// lookups), and rank the candidates (one pass, no sort) only when the session must be
// placed or its backend is over the bound. The drain model adds a clock read and a compare-and-swap on
// the chosen backend's horizon.
func (s *Scheduler) Acquire(sessionID, tier string, candidates []Backend, cost int64) (l Lease, err error) {
	if cost < 0 {
		return Lease{}, fmt.Errorf("%w: %d is negative", ErrInvalidCost, cost)
	}
	if err := s.validate(sessionID, tier, candidates); err != nil {
		return Lease{}, err
	}
	units := min(max(cost, 1), MaxLeaseCost)
	ci, out, g, err := s.decide(sessionID, tier, candidates, s.ld.p.on, units)
	if err != nil {
		return Lease{}, err
	}
	b := &candidates[ci]
	l.AffinityHit, l.Outcome = out == OutcomeHit, out
	l.rec, l.gen = s.open(b, g, l.AffinityHit, sessionID, tier)
	l.Backend = *b
	return l, nil
}

// spillTarget returns the placement a hit on candidates[ci] (whose load is bl) should move
// to, or w = -1 to stay (the caller has checked that the bound backend is not idle, as an
// idle backend is never overloaded, and that its wait exceeds spill_cost_weight x rp):
// the bound backend must be over the bound, a target under the bound must exist after it on the session's
// HRW ranking, and wait(bound) - wait(target) > spill_cost_weight x rp.
//
// A binding whose guard reprefill rp is 0 (its prefix is believed evicted: rule 14d)
// has nothing to lose by moving: it is placed as a new session would be (the bounded-load
// walk over its whole ranking) and moves there when that is another backend, less loaded
// than its own.
func (s *Scheduler) spillTarget(kh uint64, cands []Backend, ci int, bl *backendLoad, units, rp int64) placement {
	stay := placement{w: -1}
	if rp == 0 {
		pl, err := s.walk(kh, cands, units, -1)
		if err != nil || pl.w < 0 || pl.w == ci {
			return stay
		}
		if pl.boundLoad = bl.view(&s.ld.p, s.drainNow()); pl.load >= pl.boundLoad {
			return stay
		}
		pl.boundOver = true
		return pl
	}
	pl, err := s.walk(kh, cands, units, ci)
	if err != nil || !pl.boundOver || pl.w < 0 {
		return stay
	}
	if float64(pl.boundLoad-pl.load) <= s.ld.p.weight*float64(rp) {
		return stay
	}
	return pl
}
