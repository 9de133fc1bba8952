package affinity

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/agentserve/sessionaffinity/health"
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

// Lease is one request placed by [Scheduler.Acquire]: the backend to forward to, the
// affinity-hit flag and the outcome, and the request's share of that backend's
// outstanding load until [Lease.Done]. The caller owns its memory (a local variable, a
// field of its per-request state): Acquire fills it, Done releases it, and Acquire may
// fill it again afterwards, so leasing allocates nothing. The zero Lease is valid and
// its Done does nothing.
//
// A Lease must not be copied once filled: a copy would be a second lease on the same
// load (go vet's copylocks check reports copies). Share a *Lease instead: Done is
// idempotent and safe from any goroutine on the same *Lease. Acquire must not fill a
// Lease while a Done on it may still be running (as with sync.WaitGroup's reuse).
//
// Modelled on grpc-go's balancer.PickResult.Done: the picker decides and accounts, the
// caller reports the end.
type Lease struct {
	_ noCopy
	// Backend is the caller's candidate value to forward the request to.
	Backend Backend
	// AffinityHit is true exactly when SelectBackend would have reported a hit: the
	// backend of the session's still-valid binding served this turn.
	AffinityHit bool
	// Outcome is hit, miss, rebind or spill.
	Outcome Outcome

	state uint32 // leaseOpen and the lease's flags from Acquire to the first Done, then 0 (atomic after Acquire)
	s     *Scheduler
	bl    *backendLoad
	cost  int64
	start int64 // clock reading at Acquire (drain model only)
	idle  int64 // a hit's time since its binding's previous use, ns (drain model only)
	rp    int64 // a hit's expected cached prefix, tokens (drain model only; 0: not a hit, or no reported prompt size)

	session, tier string
}

// Lease.state bits: set by Acquire, read and cleared at once by the first Done.
const (
	leaseOpen  uint32 = 1 << iota // from Acquire to the first Done
	leaseHit                      // AffinityHit as leased (the exported field is the caller's to change)
	leaseDrain                    // the Scheduler runs the drain model (Done feeds it)
)

// noCopy makes go vet's copylocks check report copies of the struct that holds it.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// Done releases the lease: the request no longer counts in its backend's outstanding
// load. Only the first Done counts; later calls, and Done on the zero Lease or a nil
// *Lease, do nothing. Safe from any goroutine, concurrently with other Done calls on
// the same *Lease, also after OnBackendDown(Backend.ID()) (the load is released;
// bindings are unaffected).
//
// When info reports usage (PromptTokens > 0) and no error, with load awareness on, the
// session's binding remembers the prompt size and, when the cached tokens were reported
// (CachedPromptTokens > 0, or 0 with CacheReported), whether the cache was lost (cached / prompt
// <= cold_cache_ratio), which the spill guard uses; an unreported count leaves the
// binding not lost. An affinity hit that reported both adds its prompt and cached prompt
// tokens to the tier's achieved reuse ([Scheduler.Reuse], and metrics.UsageRecorder if
// the Recorder implements it); one whose cached count was not reported is not counted
// there (its reuse is unknown, not 0 %).
//
// Cost: one atomic swap on the Lease and one atomic add on the backend's load,
// 0 allocs; with usage and load awareness on, one xxh3 hash of the session ID and one
// shard lock; with the drain model (load.drain_tokens_per_second) also a clock read and
// a short per-backend lock.
func (l *Lease) Done(info DoneInfo) {
	prompt := info.PromptTokens
	if info.Err != nil { // a failed request's usage is ignored
		prompt = 0
	}
	l.done(prompt, info.CachedPromptTokens, info.CacheReported)
}

// done is Done with the usage it records as scalars (prompt > 0: reported, by a request
// that succeeded; cached and reported as in DoneInfo): a DoneInfo argument (48 bytes)
// would be stored to the stack before the swap. Done inlines into its caller; turning
// an unreported count into cachedUnknown here rather than there keeps it within the
// inlining budget.
func (l *Lease) done(prompt, cached int64, reported bool) {
	if l == nil {
		return
	}
	if st := atomic.SwapUint32(&l.state, 0); st&leaseOpen != 0 {
		l.bl.sub(l.cost)
		if st&leaseDrain != 0 || prompt > 0 {
			if cached == 0 && !reported {
				cached = cachedUnknown
			}
			l.s.learn(l, st, prompt, cached)
		}
	}
}

// loadState is the Scheduler's load-awareness state.
type loadState struct {
	p       loadParams
	loads   loadTable
	usage   usageTable
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

// open fills l with the lease of a decision: backend b (whose load record is g.bl, or nil
// to look it up) is charged g.charge prompt tokens. l is not open (checked by the caller)
// and the caller has set l.session and l.tier (fewer arguments: all in registers).
// Acquire's hit path, and its misses that read load, take fill alone.
func (s *Scheduler) open(l *Lease, b *Backend, out Outcome, g grant) {
	if g.bl == nil {
		g.bl = s.ld.loads.get(b.node.ID(), b.node.Hash())
	}
	st := l.fill(s, b, out, g.bl, g.charge)
	if s.ld.p.drainRate > 0 { // drainmodel.go (start, idle and rp are read only then)
		st |= leaseDrain
		l.start = s.t.clock.now()
		g.bl.charge(&s.ld.p, l.start, g.charge)
		l.idle, l.rp = g.idle, g.rp
	}
	l.state = st // published to other goroutines by whatever hands them l
}

// fill is the part of open that every lease takes: bl, the load record of backend b,
// grows by one request and charge; l gets the decision. It returns l's state, which the
// caller stores last. Small enough to inline: Acquire's hit path calls no function after
// deciding.
func (l *Lease) fill(s *Scheduler, b *Backend, out Outcome, bl *backendLoad, charge int64) uint32 {
	bl.add(charge)
	l.Backend, l.Outcome, l.AffinityHit = *b, out, out == OutcomeHit
	l.s, l.bl, l.cost = s, bl, charge
	if out == OutcomeHit {
		return leaseOpen | leaseHit
	}
	return leaseOpen
}

// refuse returns the error of an Acquire whose arguments failed the quick check:
// badLease's, or validate's.
func (s *Scheduler) refuse(sessionID, tier string, candidates []Backend, cost int64, l *Lease) error {
	if err := badLease(cost, l); err != nil {
		return err
	}
	return s.validate(sessionID, tier, candidates)
}

// badLease returns ErrInvalidLease (l nil or open) or ErrInvalidCost, else nil.
func badLease(cost int64, l *Lease) error {
	switch {
	case l == nil:
		return fmt.Errorf("%w: nil *Lease", ErrInvalidLease)
	case atomic.LoadUint32(&l.state)&leaseOpen != 0:
		return fmt.Errorf("%w: still open (Done not called)", ErrInvalidLease)
	case cost < 0:
		return fmt.Errorf("%w: %d is negative", ErrInvalidCost, cost)
	}
	return nil
}

// Acquire decides like SelectBackend and leases the request into l: the chosen backend's
// outstanding load grows by one request and by cost until l.Done. cost is the request's
// estimated prefill work in prompt tokens (body bytes / 4, or the previous turn's usage);
// 0 counts as 1, more than MaxLeaseCost as MaxLeaseCost, negative is ErrInvalidCost.
// l may be a zero Lease or one whose Done has returned (see [Lease] for reuse).
//
// With load awareness off (Config.Load absent) the decision is exactly SelectBackend's:
// both run the same decision code, which then reads no load.
// With it on, a miss walks the session's HRW ranking over the eligible candidates and
// takes the first backend whose load, this request counted, is within balance_factor x
// the mean (x its weighted share when the candidates' weights differ); a hit whose
// backend is over that bound moves (a spill) when the spill guard allows it. The package
// documentation ("Load awareness") states the rules.
//
// Errors: those of SelectBackend, ErrInvalidCost, and ErrInvalidLease (l nil or still
// open); nothing is stored, counted or leased then, and l is unchanged. Safe for
// concurrent use (on different Leases). Cost: SelectBackend's plus one atomic add and
// the writes that fill l (0 allocs); with load awareness on, a hit reads
// its own backend's load only, unless that backend's wait exceeds spill_cost_weight x
// reprefill (only then can the guard let it spill); such a hit and every miss read the
// load of each candidate (O(len(candidates)) atomic loads; the load records of a list of
// candidates seen recently come from one remembered array, others from lock-free map
// lookups), and rank the candidates (one pass, no sort) only when the session must be
// placed or its backend is over the bound. The drain model adds a clock read and a compare-and-swap on
// the chosen backend's horizon.
func (s *Scheduler) Acquire(sessionID, tier string, candidates []Backend, cost int64, l *Lease) error {
	if l == nil || atomic.LoadUint32(&l.state)&leaseOpen != 0 || cost < 0 || !s.t.validKey(sessionID, tier) || len(candidates) == 0 {
		return s.refuse(sessionID, tier, candidates, cost, l)
	}
	units := min(max(cost, 1), MaxLeaseCost)
	ci, out, g, err := s.decide(sessionID, tier, candidates, s.ld.p.on, units)
	if err != nil {
		return err
	}
	l.session, l.tier = sessionID, tier
	if g.bl == nil || s.ld.p.drainRate > 0 { // a miss that read no load, or the drain model
		s.open(l, &candidates[ci], out, g)
		return nil
	}
	// open without its rare cases, inlined: a call here would cost as much as the writes.
	l.state = l.fill(s, &candidates[ci], out, g.bl, g.charge)
	return nil
}

// LeaseBackend leases a request the caller routes itself onto b, with no routing
// decision: b's outstanding load grows by one request and by cost until l.Done, as for
// [Scheduler.Acquire], and nothing else happens — no binding is read, stored, moved or
// broken, no hit, miss or broken binding is counted, and b's health is not checked. For
// a retry sent to another backend than the session's binding (the binding stays, the
// load goes where the request is served) or a request without a session. l gets
// Backend b, AffinityHit false and Outcome OutcomeMiss (not a hit on a binding); Done
// releases it and records usage like any lease, except the binding and reuse updates,
// which belong to hits (Done feeds the drain model as usual).
//
// Errors (nothing leased, l unchanged): ErrInvalidLease (l nil or still open),
// ErrInvalidCost (negative cost), ErrInvalidBackend (the zero Backend). Safe for
// concurrent use (on different Leases). Cost: one lock-free load-record lookup, one
// atomic add and the writes that fill l, 0 allocs.
func (s *Scheduler) LeaseBackend(b Backend, cost int64, l *Lease) error {
	if err := badLease(cost, l); err != nil {
		return err
	}
	if b.node.ID() == "" {
		return fmt.Errorf("%w: the zero Backend", ErrInvalidBackend)
	}
	l.session, l.tier = "", ""
	s.open(l, &b, OutcomeMiss, grant{charge: min(max(cost, 1), MaxLeaseCost)})
	return nil
}

// spillTarget returns the placement a hit on candidates[ci] (whose load record is bl)
// should move to, or w = -1 to stay (the caller has checked guardStays: the bound backend
// is not idle, as an idle backend is never overloaded, and its wait exceeds
// spill_cost_weight x rp): the bound backend must be over the bound, a target under the
// bound must exist after it on the session's HRW ranking (both by load, the floor of
// min_request_cost counted), and wait(bound) - wait(target) > spill_cost_weight x rp (by
// wait: without the floor, guardWaits). A spill's placement then carries the two waits
// in boundLoad and load (the Debug log's wait_from and wait_to).
//
// A binding whose guard reprefill rp is 0 (its prefix is believed evicted: rule 14d)
// has nothing to lose by moving: it is placed as a new session would be (the bounded-load
// walk over its whole ranking) and moves there when that is another backend, less loaded
// than its own (by load, the floor counted: no wait term, as nothing is thrown away).
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
	// The walk with the hit's candidate as the bound, its fast path written out here: a
	// placement is too large for registers, and each call level that returns one copies
	// it through the stack (most of a busy hit's cost at 8 candidates).
	if es := s.ld.cands.list(cands); es != nil {
		if sp, ok := s.stayFast(kh, cands, es, units, ci); ok {
			if !sp.over || sp.w < 0 {
				return stay
			}
			to := es[sp.w].bl
			from, at := s.guardWaits(bl, to, sp.boundLoad, sp.load)
			if float64(from-at) <= s.ld.p.weight*float64(rp) {
				return stay
			}
			return placement{w: sp.w, st: health.Healthy, bl: to, load: at, boundLoad: from, boundOver: true}
		}
	}
	pl, err := s.walkFull(kh, cands, units, ci)
	if err != nil || !pl.boundOver || pl.w < 0 {
		return stay
	}
	if pl.boundLoad, pl.load = s.guardWaits(bl, pl.bl, pl.boundLoad, pl.load); float64(pl.boundLoad-pl.load) <= s.ld.p.weight*float64(rp) {
		return stay
	}
	return pl
}

// guardWaits returns the waits of the spill guard's two terms (rule 17): those of the
// bound backend from and of the spill target to, whose loads the walk read as lf and lt.
// Without min_request_cost and the drain model the wait is the load, so it returns lf
// and lt (the guard compares the view the walk decided on, as before rule 14e's guard
// change); with either it reads both records' waits anew (the load without the floor
// and without the drain model's per-request time: wait), a few atomic loads on a spill
// candidate only (the bound backend over the bound with a target under it). The two
// reads are a later snapshot than the walk's, as a concurrent Acquire or Done may land
// between them; like any load read, racing, never torn.
func (s *Scheduler) guardWaits(from, to *backendLoad, lf, lt int64) (wf, wt int64) {
	p := &s.ld.p
	if p.minCost == 0 && p.drainRate == 0 {
		return lf, lt
	}
	now := s.drainNow()
	return from.wait(p, now), to.wait(p, now)
}
