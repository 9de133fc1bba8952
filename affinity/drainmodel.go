package affinity

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The drain model (load.drain_tokens_per_second > 0) refines the load view of rule 14 with
// what a gateway learns from Lease.Done (package documentation, "Load awareness", rules
// 14a-14d):
//
//   - Drain. Per backend it keeps fin, the clock reading (ns of the Scheduler's clock) at
//     which everything charged so far will have been processed: a lease of c tokens at
//     now moves it to max(fin, now) + perRequest + c x perToken — the virtual finish time
//     of a work-conserving FIFO server (the device of virtual-clock fair queueing: Zhang,
//     "VirtualClock", SIGCOMM 1990). The load view is (fin - now) / perToken prompt tokens,
//     at most what the open leases charged, so work the backend has had the time to
//     process stops counting, even while its response is still streaming. Each Done
//     re-anchors fin to now + the open leases' charges (their requests have not ended, so
//     at least that much is left for a FIFO engine), or to now when none is open.
//   - Service model. perRequest and perToken are a least-squares fit, over
//     exponentially weighted samples (weight drain_ewma_weight; least squares with
//     exponential forgetting, Ljung and Söderström, "Theory and Practice of Recursive
//     Identification", 1983), of each request's
//     service time on its uncached prompt tokens (prompt - cached reported to Done, else
//     the lease's charge). A request's service time is its end minus the later of its
//     start and the backend's previous end: exact for a FIFO server, and for a batching
//     engine the sum over requests is the backend's busy time. perRequest absorbs the
//     decoding and overhead of an average request. Before a backend's first Done,
//     perRequest is 0 and perToken 1 / drain_tokens_per_second.
//   - Cache retention. A hit expects its prefix to be cached only if its binding was idle
//     for less than the backend's learned retention: a least-recently-used prefix cache
//     frees a prompt's blocks together, so a prefix mostly survives or mostly does not.
//     Each hit's Done updates the retention as a threshold: an eviction (cached < half
//     the expected prefix) after an idle time below it pulls it down, a survival above it
//     pushes it up, each by drain_ewma_weight of the distance; the first eviction sets
//     it. A hit idle for longer is charged its whole cost, and with
//     retention_guard_factor f > 0 a hit idle for at least f x the retention counts as
//     evicted in the spill guard (reprefill 0: moving it is free).
//   - Prefix survival. The retention is a threshold; how often a prefix survives past it
//     depends on the cache (with large caches most prefixes idle 1-2 retentions
//     survive, with small ones few do): an LRU cache acts like a TTL cache whose
//     characteristic time moves with its insertion rate (Che, Tung and Wang, IEEE JSAC
//     2002), so a fixed threshold is only right on average. So each backend also keeps the survival rate of
//     its hits idle past the retention, by idle time in retentions (bins [1, 1.5),
//     [1.5, 2), [2, 2.5), [2.5, 3), [3, 4), [4, inf)): an exponentially weighted mean,
//     weight drain_ewma_weight, of 1 (the prefix survived) or 0 (evicted) over the hits
//     of each bin. Past the retention the spill guard's reprefill is the prefix expected
//     to survive: the binding's prefix x the survival rate of its bin. A rate starts at
//     1 (the step model above) and moves by drain_ewma_weight per hit, so one eviction
//     takes it to 1 - drain_ewma_weight, not to 0.
//
// Concurrency: Acquire touches only atomics (a compare-and-swap on fin); Done takes the
// backend's mutex. A Done racing an Acquire on the same backend may count that lease
// twice in the horizon until the next Done re-anchors it (an overestimate); it never
// drops one (see anchor).
type drainState struct {
	fin   atomic.Int64  // clock ns at which the charged work has drained
	perTk atomic.Uint64 // learned ns per token (float64 bits); 0 = none yet
	perRq atomic.Uint64 // learned ns per request (float64 bits)
	keep  atomic.Int64  // learned cache retention, ns; 0 = none yet
	// lost holds, per bin of idle time past the retention (survivalBin), 1 - the
	// survival rate of hits as float64 bits: the zero value is "always survives".
	lost [survivalBins]atomic.Uint64

	mu       sync.Mutex // serializes learning
	lastDone int64      // clock ns of the latest Done
	ex, ey   float64    // weighted means of tokens and service time (ns) per request
	exx, exy float64    // weighted means of tokens² and tokens x service time
}

// DefaultDrainEWMAWeight is load.drain_ewma_weight when 0: the weight of each completed
// request in the drain model's service fit, cache retention and prefix survival rates.
const DefaultDrainEWMAWeight = 0.05

// model returns the backend's service model: ns per request and ns per token.
func (b *backendLoad) model(p *loadParams) (perRq, perTk float64) {
	if t := math.Float64frombits(b.dr.perTk.Load()); t > 0 {
		return math.Float64frombits(b.dr.perRq.Load()), t
	}
	return 0, 1e9 / p.drainRate
}

// charge adds a request of c tokens at now to the backend's drain horizon.
func (b *backendLoad) charge(p *loadParams, now, c int64) {
	rq, tk := b.model(p)
	d := int64(math.Min(rq+float64(c)*tk, math.MaxInt64/4))
	for {
		f := b.dr.fin.Load()
		nf := max(f, now)
		nf += min(d, math.MaxInt64-nf) // saturate: a horizon past the int64 range stays at its end
		if b.dr.fin.CompareAndSwap(f, nf) {
			return
		}
	}
}

// remaining returns the work not yet drained at now in prompt tokens (time / ns per
// token), at most the open leases' charges: l tokens over n requests, plus their
// per-request time; at most MaxLoadView.
func (b *backendLoad) remaining(p *loadParams, now, n, l int64) int64 {
	f := b.dr.fin.Load()
	if f <= now {
		return 0
	}
	rq, tk := b.model(p)
	return satLoad(min(math.Ceil(float64(f-now)/tk), float64(l)+float64(n)*rq/tk))
}

// undrained returns the part of the open leases' charges l not yet drained at now, in
// prompt tokens: the horizon's distance from now (time / ns per token), at most l. It is
// remaining without the per-request time, the spill guard's wait (rules 14a and 17): that
// time (decoding and overhead) may keep the horizon ahead of now for as long as the open
// requests decode, but it lifts the wait no higher than the charges, so a backend
// decoding requests whose prefill is done or cached does not look as if it queued
// prefill. l > 0.
func (b *backendLoad) undrained(p *loadParams, now, l int64) int64 {
	f := b.dr.fin.Load()
	if f <= now {
		return 0
	}
	_, tk := b.model(p)
	if x := math.Ceil(float64(f-now) / tk); x < float64(l) {
		return int64(x)
	}
	return l
}

// satLoad converts a load in prompt tokens to int64, saturating at MaxLoadView (a float64
// beyond the int64 range must not be converted: the result is implementation-defined).
func satLoad(x float64) int64 {
	if !(x < MaxLoadView) { // NaN too
		return MaxLoadView
	}
	return max(int64(x), 0)
}

// learn records a request of the backend that was leased at start, ended at now and
// processed tokens, after its lease was released: it re-anchors the horizon on the open
// leases and refits the service model.
func (b *backendLoad) learn(p *loadParams, start, now, tokens int64) {
	b.dr.mu.Lock()
	defer b.dr.mu.Unlock()
	defer b.anchor(p, now)
	from := max(start, b.dr.lastDone)
	b.dr.lastDone = max(b.dr.lastDone, now)
	y, x := float64(now-from), float64(tokens)
	if y <= 0 || tokens <= 0 {
		return
	}
	d := &b.dr
	if d.ey == 0 {
		d.ex, d.ey, d.exx, d.exy = x, y, x*x, x*y
	} else {
		a := p.drainEWMA
		d.ex += a * (x - d.ex)
		d.ey += a * (y - d.ey)
		d.exx += a * (x*x - d.exx)
		d.exy += a * (x*y - d.exy)
	}
	// time = perRq + perTk x tokens; a degenerate fit (no spread in tokens, or a slope or
	// intercept <= 0) falls back to the ratio of the means (perRq 0).
	rq, tk := 0.0, d.ey/d.ex
	if v := d.exx - d.ex*d.ex; v > 1e-9*d.exx {
		if s := (d.exy - d.ex*d.ey) / v; s > 0 && d.ey-s*d.ex > 0 {
			rq, tk = d.ey-s*d.ex, s
		}
	}
	d.perRq.Store(math.Float64bits(rq))
	d.perTk.Store(math.Float64bits(tk))
}

// anchor sets the horizon to now + the open leases' work (their requests have not ended);
// now when none is open.
//
// The compare-and-swap retries when an Acquire's charge moved the horizon in between, so
// that lease is then in the counts read (add precedes charge): a concurrent lease may be
// counted twice, never lost.
func (b *backendLoad) anchor(p *loadParams, now int64) {
	rq, tk := b.model(p)
	for {
		f := b.dr.fin.Load()
		n, l := b.counts()
		if b.dr.fin.CompareAndSwap(f, now+int64(math.Min(float64(n)*rq+float64(l)*tk, math.MaxInt64/4))) {
			return
		}
	}
}

// retainedPrefix returns, for a hit on the backend idle for idle ns whose binding expects
// rp cached tokens (rule 17's reprefill), the guard's reprefill and the prefix it expects
// the backend to still hold. With no retention learned yet: rp for both. Otherwise the
// prefix expected held is rp while idle is below the retention and 0 past it; the guard's
// reprefill is rp x the learned survival rate of the binding's bin of idle / retention,
// and 0 once idle reaches retention_guard_factor x the retention.
func (b *backendLoad) retainedPrefix(p *loadParams, idle, rp int64) (guard, kept int64) {
	k := b.dr.keep.Load()
	if k <= 0 {
		return rp, rp
	}
	r := float64(idle) / float64(k)
	if p.guardFactor > 0 && r >= p.guardFactor {
		return 0, 0
	}
	if idle < k { // expected cached: protected in full
		return rp, rp
	}
	lost := math.Float64frombits(b.dr.lost[survivalBin(r)].Load())
	return int64(float64(rp) * (1 - lost)), 0
}

// survivalEdges are the upper edges of the survival bins, in retentions of idle time: the
// first bin starts at 1 retention, the last is open.
var survivalEdges = [...]float64{1.5, 2, 2.5, 3, 4}

const survivalBins = len(survivalEdges) + 1

// survivalBin returns the survival bin of r >= 1 retentions of idle time.
func survivalBin(r float64) int {
	for i, e := range survivalEdges {
		if r < e {
			return i
		}
	}
	return len(survivalEdges)
}

// learnSurvival folds a hit idle for idle >= k ns that found its prefix (survived) or
// not into the survival rate of its bin, idle / k retentions (k > 0, the retention the
// hit was judged by).
func (b *backendLoad) learnSurvival(p *loadParams, idle, k int64, survived bool) {
	x := 1.0 // lost
	if survived {
		x = 0
	}
	bin := &b.dr.lost[survivalBin(float64(idle)/float64(k))]
	for {
		o := bin.Load()
		v := math.Float64frombits(o)
		if bin.CompareAndSwap(o, math.Float64bits(v+p.drainEWMA*(x-v))) {
			return
		}
	}
}

// learnRetention updates the backend's cache retention from a hit that was idle for idle
// ns, expected rp cached tokens and found cached. Its callers pass only hits whose rp is
// evidence: a binding with a reported prompt size (flagKnown, usage.go; without one rp is
// the new turn's cost, a guess) and a reported cached count.
func (b *backendLoad) learnRetention(p *loadParams, idle, rp, cached int64) {
	survived := cached >= (rp+1)/2 // 2 x cached >= rp without overflowing for huge cached
	if k := b.dr.keep.Load(); k > 0 && idle >= k {
		b.learnSurvival(p, idle, k, survived)
	}
	for {
		k := b.dr.keep.Load()
		var nk int64
		switch {
		case k == 0 && survived:
			return
		case k == 0:
			nk = max(idle, 1)
		case survived && idle > k:
			nk = k + int64(p.drainEWMA*float64(idle-k))
		case !survived && idle < k:
			nk = max(k-int64(p.drainEWMA*float64(k-idle)), 1)
		default:
			return
		}
		if b.dr.keep.CompareAndSwap(k, nk) {
			return
		}
	}
}

// drainNow returns the clock reading the drain model needs, or 0 when it is off (no clock
// read).
func (s *Scheduler) drainNow() int64 {
	if s.ld.p.drainRate > 0 {
		return s.t.clock.now()
	}
	return 0
}

// learnDrain feeds a released lease to the drain model: the backend's uncached prompt
// tokens when reported (prompt > 0 and cached >= 0: prompt - cached, at least 1), else
// the lease's charge (the uncached work it was leased with; also when only the cached
// count is missing: prompt alone would count a warm hit's whole prompt as prefilled).
func (s *Scheduler) learnDrain(bl *backendLoad, start, charge, prompt, cached int64) {
	tokens := charge
	if prompt > 0 && cached >= 0 {
		tokens = max(prompt-min(cached, prompt), 1)
	}
	bl.learn(&s.ld.p, start, s.t.clock.now(), tokens)
}

// DrainModel is what the drain model has learned about one backend
// ([Scheduler.Drain]).
type DrainModel struct {
	// TokensPerSecond is the marginal prefill rate: uncached prompt tokens per second of
	// engine time (load.drain_tokens_per_second until the backend's first Done).
	TokensPerSecond float64
	// PerRequest is the engine time of a request beyond its prompt tokens (decoding and
	// overhead of an average request); 0 until learned.
	PerRequest time.Duration
	// CacheRetention is how long a binding may stay idle and still find its prefix cached
	// on the backend; 0 until a hit found its prefix evicted.
	CacheRetention time.Duration
}

// Drain returns what the drain model has learned about backendID, or the zero value when
// the drain model is off. Lock-free, 0 allocs. Safe for concurrent use.
func (s *Scheduler) Drain(backendID string) DrainModel {
	if s.ld.p.drainRate <= 0 {
		return DrainModel{}
	}
	out := DrainModel{TokensPerSecond: s.ld.p.drainRate}
	if b := s.ld.loads.lookup(backendID); b != nil {
		rq, tk := b.model(&s.ld.p)
		out.TokensPerSecond, out.PerRequest = 1e9/tk, time.Duration(rq)
		out.CacheRetention = time.Duration(b.dr.keep.Load())
	}
	return out
}

// LoadView returns backendID's load as the placement rules see it at the Scheduler's
// current clock reading, in prompt tokens (package documentation, "Load awareness", rules
// 14, 14a and 14e): the open leases' charges (with the drain model on, at most the work not
// yet drained), at least min_request_cost per open lease, plus queued_request_cost per request reported beyond the leases open at
// the report (ReportLoad), saturating at MaxLoadView. 0 with load awareness off or for a
// backend never seen. One clock read, lock-free, 0 allocs. Safe for concurrent use.
func (s *Scheduler) LoadView(backendID string) int64 {
	if !s.ld.p.on {
		return 0
	}
	if b := s.ld.loads.lookup(backendID); b != nil {
		return b.view(&s.ld.p, s.t.clock.now())
	}
	return 0
}
