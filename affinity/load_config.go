package affinity

import (
	"fmt"
	"math"
)

// Defaults of [LoadConfig] applied when a field is zero (or nil) and load awareness is on.
const (
	// DefaultSpillCostWeight is spill_cost_weight when the key is omitted (nil): the value
	// that met the project's replay goal (README, "Load-aware affinity").
	DefaultSpillCostWeight = 5.0
	// DefaultQueuedRequestCost is queued_request_cost when 0: the prompt tokens charged for
	// each request a backend reports (ReportLoad) beyond the ones leased here.
	DefaultQueuedRequestCost = 1024
	// DefaultColdCacheRatio is cold_cache_ratio when 0.
	DefaultColdCacheRatio = 0.05
)

// Ranges of the numeric [LoadConfig] keys: a value outside its range is ErrInvalidConfig
// naming the key. Beyond these limits a key no longer changes any decision (or breaks the
// arithmetic: a drain rate of 1e-300 tokens/s makes a token take forever), so such a
// value is a typo, not a setting.
const (
	// MaxBalanceFactor is the largest balance_factor (100, Envoy's and HAProxy's 10000 %):
	// a larger bound never excludes a backend.
	MaxBalanceFactor = 100.0
	// MaxSpillCostWeight is the largest spill_cost_weight (MaxLoadView, 2^46): no queue
	// can beat that weight x even a 1-token prefix, so at this value only sessions whose
	// cache is known lost (reprefill 0) spill; disable_spill turns spilling off entirely.
	MaxSpillCostWeight = float64(MaxLoadView)
	// MaxQueuedRequestCost is the largest queued_request_cost: MaxLeaseCost (2^24 prompt
	// tokens), the most a lease is charged.
	MaxQueuedRequestCost = MaxLeaseCost
	// MinDrainTokensPerSecond is the smallest non-zero drain_tokens_per_second (1 prompt
	// token per second; below it a token's time overflows the model's arithmetic).
	MinDrainTokensPerSecond = 1.0
	// MaxDrainTokensPerSecond is the largest drain_tokens_per_second (1e9 prompt tokens
	// per second, 1 ns per token: the clock's resolution).
	MaxDrainTokensPerSecond = 1e9
	// MinDrainEWMAWeight is the smallest non-zero drain_ewma_weight (1e-4: a model that
	// needs more than ~10,000 responses to move would never learn); the largest is 1.
	MinDrainEWMAWeight = 1e-4
	// MaxRetentionGuardFactor is the largest retention_guard_factor (1000).
	MaxRetentionGuardFactor = 1000.0
	// MaxLoadView is the largest load a backend is seen with, in prompt tokens (2^46): the
	// load view saturates there instead of overflowing, whatever ReportLoad was told, so a
	// backend reporting a huge queue looks as loaded as possible, never idle, and the sum
	// over up to 2^17 candidates still fits an int64.
	MaxLoadView = 1 << 46
)

// LoadConfig is the `load:` block of [Config]: load awareness for [Scheduler.Acquire].
// The zero value (the key omitted) is off: Acquire then decides exactly as SelectBackend.
// SelectBackend never looks at load, whatever this block says.
//
// Units: load is outstanding prefill work in prompt tokens ("cost" in Acquire; a request
// with cost 0 counts as 1 token, so callers that do not estimate cost get the
// request-count semantics of Envoy's and HAProxy's hash balance factor).
type LoadConfig struct {
	// BalanceFactor bounds the load of a backend that receives a new session (or a
	// spilled one) to BalanceFactor x the mean load of the eligible candidates, this
	// request counted, or x its weighted share of their load (total x weight / sum of
	// the eligible weights) when their weights differ ("Consistent Hashing with Bounded
	// Loads", Mirrokni, Thorup and Zadimoghaddam, SODA 2018; Envoy's and HAProxy's
	// hash_balance_factor, there in percent). 0 (the default) turns load awareness off; otherwise it must lie in
	// [1, MaxBalanceFactor] (100). The project's replay recommends 1.25. Every other key
	// of this block acts only through load awareness: setting one while balance_factor is
	// 0 is ErrInvalidConfig naming both keys (a typo must not leave a feature silently off).
	BalanceFactor float64 `yaml:"balance_factor,omitempty" json:"balance_factor,omitempty"`
	// SpillCostWeight is w in the spill guard: a session whose bound backend is over the
	// bound moves only when wait(bound) - wait(target) > w x reprefill(session), all in
	// prompt tokens. nil (omitted) means DefaultSpillCostWeight (5): move when the queue
	// saved is more than 5x the prefix thrown away. Must lie in [0, MaxSpillCostWeight]
	// (2^46, about 7e13).
	SpillCostWeight *float64 `yaml:"spill_cost_weight,omitempty" json:"spill_cost_weight,omitempty"`
	// DisableSpill keeps every valid binding where it is (only new sessions are placed by
	// bounded load).
	DisableSpill bool `yaml:"disable_spill,omitempty" json:"disable_spill,omitempty"`
	// QueuedRequestCost is the prompt tokens charged for each request a backend reports
	// through [Scheduler.ReportLoad] (waiting + running) beyond the leases of this
	// Scheduler open when it reported, e.g. requests of other gateway replicas. 0 means
	// DefaultQueuedRequestCost (1024); must lie in [0, MaxQueuedRequestCost] (2^24). The
	// resulting load saturates at MaxLoadView, however many requests are reported.
	QueuedRequestCost int64 `yaml:"queued_request_cost,omitempty" json:"queued_request_cost,omitempty"`
	// MinRequestCost is a floor, in prompt tokens, on what the leases open on a backend
	// weigh in its load view: the view counts at least MinRequestCost x the open leases
	// (package documentation, "Load awareness", rule 14e), so requests in flight weigh
	// like queued work even when their prefix is cached (a fully cached hit is charged 1
	// token however long it decodes). The floor is taken after the drain model (an open
	// lease still holds a running slot when its prefill has drained) and is a maximum,
	// not a sum: it adds nothing to a backend whose charges already exceed it, and
	// requests reported beyond the leases (ReportLoad) keep queued_request_cost each. It
	// counts in the bound: bounded-load placement of new sessions, their ranking, whether
	// a bound backend is over the bound and a spill target under it, the placement of a
	// binding whose prefix is lost, and [Scheduler.LoadView]. It does not count as wait
	// in the spill guard: wait(bound) - wait(target) > spill_cost_weight x reprefill (and
	// the hit's own test, wait(bound) <= spill_cost_weight x reprefill: stay) read the
	// view without the floor, since a cached decode in flight holds a slot but does not
	// delay a new prefill as queued prefill does; so a short-prompt session stays on a
	// backend that has one more request in flight than another. Lease charges
	// ([Scheduler.Load], Lease cost) are unchanged. 0 (the default) is off (every
	// decision as without the key); must lie in [0, MaxLeaseCost] (2^24).
	MinRequestCost int64 `yaml:"min_request_cost,omitempty" json:"min_request_cost,omitempty"`
	// ColdCacheRatio: a binding whose last hit reported cached / prompt tokens at or below
	// this ratio has lost its prefix on the backend (evicted there), so moving it costs
	// nothing: the spill guard uses reprefill 0 for it, and on a busy backend it is placed
	// anew when that finds a less loaded backend (rule 18). 0 means DefaultColdCacheRatio
	// (0.05); must lie in [0, 1]. The ratio is used at full precision (cached <= ratio x
	// prompt, in float64): 0.0004 marks a 10,000-token prompt cold with at most 4 cached
	// tokens; a ratio below 1 / prompt (e.g. 1e-9) marks only cached == 0 as cold.
	ColdCacheRatio float64 `yaml:"cold_cache_ratio,omitempty" json:"cold_cache_ratio,omitempty"`
	// DrainTokensPerSecond turns on the drain model of the load view (package
	// documentation, "Load awareness", rules 14a-14d): each backend's charged work drains
	// with time at a service rate learned from [Lease.Done], so a lease whose prefill the
	// backend has had the time to process stops counting as queued work, and a hit is
	// charged its whole cost once its binding has been idle longer than the backend's
	// learned cache retention. The spill guard's wait reads the undrained work at most at
	// the open leases' charges: the learned per-request time (decoding) counts in the
	// bound, not as queued prefill. The value, in prompt tokens per second of engine time, is
	// the rate assumed before a backend's first Done (the learned rate replaces it).
	// 0 (the default) keeps the lease-sum view; otherwise it must lie in
	// [MinDrainTokensPerSecond, MaxDrainTokensPerSecond] (1 to 1e9).
	DrainTokensPerSecond float64 `yaml:"drain_tokens_per_second,omitempty" json:"drain_tokens_per_second,omitempty"`
	// DrainEWMAWeight is the weight of each completed request in the drain model's fit
	// (exponentially weighted means) and in its cache-retention and prefix-survival
	// estimates (package documentation, rules 14c-14d). 0 means
	// DefaultDrainEWMAWeight (0.05); otherwise it must lie in [MinDrainEWMAWeight, 1]
	// (1e-4 to 1), and drain_tokens_per_second must be > 0 (it has no other use).
	DrainEWMAWeight float64 `yaml:"drain_ewma_weight,omitempty" json:"drain_ewma_weight,omitempty"`
	// RetentionGuardFactor f: with the drain model on, a hit whose binding has been idle
	// for at least f x its backend's learned cache retention counts as evicted in the
	// spill guard (reprefill 0: moving it costs nothing), like a lost cache reported by
	// cold_cache_ratio, but predicted before the request is sent; between the retention
	// and f x the retention the guard weighs the prefix by its learned survival rate
	// (rule 14d). 0 (the default) turns
	// it off; otherwise it must lie in [1, MaxRetentionGuardFactor] (1000), and
	// drain_tokens_per_second must be > 0.
	RetentionGuardFactor float64 `yaml:"retention_guard_factor,omitempty" json:"retention_guard_factor,omitempty"`
}

// Validate reports the first invalid field of c alone, like [Config.Validate].
func (c LoadConfig) Validate() error {
	_, err := c.resolve()
	return err
}

// SpillWeight returns a pointer to w, for building a LoadConfig in code.
func SpillWeight(w float64) *float64 { return &w }

// loadParams is a validated LoadConfig with the defaults applied.
type loadParams struct {
	on          bool
	factor      float64
	weight      float64
	spill       bool
	queuedCost  int64
	maxQueued   int64   // MaxLoadView / queuedCost: more reported requests saturate the view
	minCost     int64   // min_request_cost; 0 = off
	coldRatio   float64 // cold_cache_ratio
	drainRate   float64 // drain_tokens_per_second; 0 = drain model off
	drainEWMA   float64 // drain_ewma_weight
	guardFactor float64 // retention_guard_factor; 0 = off
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func (c LoadConfig) resolve() (loadParams, error) {
	var p loadParams
	switch f := c.BalanceFactor; {
	case f == 0:
		if key := c.setKey(); key != "" {
			return p, fmt.Errorf("%w: load.%s has no effect without load.balance_factor (0 = load awareness off): set balance_factor (e.g. 1.25) or remove %s", ErrInvalidConfig, key, key)
		}
	case !finite(f) || f < 1 || f > MaxBalanceFactor:
		return p, fmt.Errorf("%w: load.balance_factor: %v (want 0 = off, or [1, %v])", ErrInvalidConfig, f, MaxBalanceFactor)
	default:
		p.on, p.factor = true, f
	}
	p.weight = DefaultSpillCostWeight
	if w := c.SpillCostWeight; w != nil {
		if !finite(*w) || *w < 0 || *w > MaxSpillCostWeight {
			return p, fmt.Errorf("%w: load.spill_cost_weight: %v (want [0, %.0f = 2^46])", ErrInvalidConfig, *w, MaxSpillCostWeight)
		}
		p.weight = *w
	}
	p.spill = !c.DisableSpill
	switch q := c.QueuedRequestCost; {
	case q < 0 || q > MaxQueuedRequestCost:
		return p, fmt.Errorf("%w: load.queued_request_cost: %d (want 0 = default %d, or [1, %d])", ErrInvalidConfig, q, DefaultQueuedRequestCost, MaxQueuedRequestCost)
	case q == 0:
		p.queuedCost = DefaultQueuedRequestCost
	default:
		p.queuedCost = q
	}
	p.maxQueued = MaxLoadView / p.queuedCost
	if m := c.MinRequestCost; m < 0 || m > MaxLeaseCost {
		return p, fmt.Errorf("%w: load.min_request_cost: %d (want 0 = off, or [1, %d])", ErrInvalidConfig, m, MaxLeaseCost)
	}
	p.minCost = c.MinRequestCost
	switch r := c.ColdCacheRatio; {
	case !finite(r) || r < 0 || r > 1:
		return p, fmt.Errorf("%w: load.cold_cache_ratio: %v (want [0, 1])", ErrInvalidConfig, r)
	case r == 0:
		p.coldRatio = DefaultColdCacheRatio
	default:
		p.coldRatio = r
	}
	switch r := c.DrainTokensPerSecond; {
	case r == 0:
	case !finite(r) || r < MinDrainTokensPerSecond || r > MaxDrainTokensPerSecond:
		return p, fmt.Errorf("%w: load.drain_tokens_per_second: %v (want 0 = off, or [%v, %v])", ErrInvalidConfig, r, MinDrainTokensPerSecond, MaxDrainTokensPerSecond)
	default:
		p.drainRate = r
	}
	switch a := c.DrainEWMAWeight; {
	case !finite(a) || a < 0 || a > 1 || (a > 0 && a < MinDrainEWMAWeight):
		return p, fmt.Errorf("%w: load.drain_ewma_weight: %v (want 0 = default %v, or [%v, 1])", ErrInvalidConfig, a, DefaultDrainEWMAWeight, MinDrainEWMAWeight)
	case a == 0:
		p.drainEWMA = DefaultDrainEWMAWeight
	case p.drainRate == 0:
		return p, fmt.Errorf("%w: load.drain_ewma_weight: %v needs load.drain_tokens_per_second > 0", ErrInvalidConfig, a)
	default:
		p.drainEWMA = a
	}
	switch g := c.RetentionGuardFactor; {
	case g == 0:
	case !finite(g) || g < 1 || g > MaxRetentionGuardFactor:
		return p, fmt.Errorf("%w: load.retention_guard_factor: %v (want 0 = off, or [1, %v])", ErrInvalidConfig, g, MaxRetentionGuardFactor)
	case p.drainRate == 0:
		return p, fmt.Errorf("%w: load.retention_guard_factor: %v needs load.drain_tokens_per_second > 0", ErrInvalidConfig, g)
	default:
		p.guardFactor = g
	}
	return p, nil
}

// setKey returns the yaml key of the first field other than balance_factor that is set
// (non-zero, or non-nil), or "".
func (c LoadConfig) setKey() string {
	switch {
	case c.SpillCostWeight != nil:
		return "spill_cost_weight"
	case c.DisableSpill:
		return "disable_spill"
	case c.QueuedRequestCost != 0:
		return "queued_request_cost"
	case c.MinRequestCost != 0:
		return "min_request_cost"
	case c.ColdCacheRatio != 0:
		return "cold_cache_ratio"
	case c.DrainTokensPerSecond != 0:
		return "drain_tokens_per_second"
	case c.DrainEWMAWeight != 0:
		return "drain_ewma_weight"
	case c.RetentionGuardFactor != 0:
		return "retention_guard_factor"
	}
	return ""
}
