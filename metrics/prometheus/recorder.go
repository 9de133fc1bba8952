package prometheus

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/metrics"
)

// Metric names, exactly as the README's "Metrics" section lists them. Dashboards and
// alerts may rely on them.
const (
	MetricHits      = "agentserve_affinity_hits_total"      // counter {tier}
	MetricMisses    = "agentserve_affinity_misses_total"    // counter {tier}
	MetricBroken    = "agentserve_affinity_broken_total"    // counter {tier, reason}
	MetricEvictions = "agentserve_affinity_evictions_total" // counter {tier}
	MetricBindings  = "agentserve_affinity_bindings"        // gauge, no labels
	// MetricPromptTokens and MetricCachedPromptTokens count the prompt tokens of affinity
	// hits and how many of them the backend served from its prefix cache, as reported to
	// a lease's Done (metrics.UsageRecorder: only hits whose backend reported its cached
	// tokens). Achieved reuse in Grafana:
	// rate(cached_prompt_tokens) / rate(prompt_tokens).
	MetricPromptTokens       = "agentserve_affinity_prompt_tokens_total"        // counter {tier}
	MetricCachedPromptTokens = "agentserve_affinity_cached_prompt_tokens_total" // counter {tier}
	// MetricParentPlaced counts first turns placed on the parent session's backend
	// (metrics.ParentRecorder); they are also counted in MetricMisses.
	MetricParentPlaced = "agentserve_affinity_parent_placed_total" // counter {tier}
	// MetricStoreErrors counts failed calls to a shared binding store (a request-path
	// call is decided locally instead) and calls that succeeded but repaired a key
	// holding no binding (redisstore: a wrong Redis type or an over-long value; answered
	// by the store, not decided locally), by op: claim, rebind, refresh, forget, watch.
	MetricStoreErrors = "agentserve_affinity_store_errors_total" // counter {op}
)

// Label names and special tier label values.
const (
	// LabelTier is the tier label of every counter.
	LabelTier = "tier"
	// LabelReason is the reason label of MetricBroken: "down", "unhealthy",
	// "not_candidate" or "overloaded" (metrics.Reason.String).
	LabelReason = "reason"
	// LabelOp is the op label of MetricStoreErrors (the metrics.StoreOp* values).
	LabelOp = "op"
	// TierDefault is the label of the empty tier "". A tier literally named "default"
	// shares its series.
	TierDefault = "default"
	// TierOther is the label every folded tier is counted under: tiers outside the
	// allow-list, tiers beyond the first MaxTiers distinct ones, and tiers that are not
	// valid UTF-8 or longer than MaxTierLabelBytes. A tier literally named "other" shares it.
	TierOther = "other"
	// DefaultMaxTiers is the number of distinct tier labels kept without an allow-list.
	DefaultMaxTiers = 32
	// MaxTierLabelBytes is the longest tier kept as a label; longer tiers fold to "other".
	MaxTierLabelBytes = metrics.MaxTierLabelBytes
)

// Errors returned by [New].
var (
	// ErrNilRegisterer: New was given a nil prometheus.Registerer. The adapter never
	// falls back to the default registry.
	ErrNilRegisterer = errors.New("promaffinity: nil prometheus.Registerer")
	// ErrInvalidOption: an option was given an invalid value (wrapped with the value).
	ErrInvalidOption = errors.New("promaffinity: invalid option")
)

// Option configures [New].
type Option interface{ apply(*config) error }

type config struct{ tiers metrics.TierLabelsConfig }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithTiers sets an allow-list of tiers kept as label values; every other tier is counted
// under "other". The empty tier is always kept as "default", allow-listed or not. The
// allowed tiers' series are created (at 0) by New, so rate() works before the first
// event. Calling WithTiers with no arguments gives an empty allow-list: only "default"
// and "other". Tiers that are not valid UTF-8 or longer than [MaxTierLabelBytes] make New
// fail with [ErrInvalidOption]. With an allow-list, WithMaxTiers is ignored.
func WithTiers(allow ...string) Option {
	list := append([]string(nil), allow...)
	return optionFunc(func(c *config) error {
		if err := c.tiers.SetAllow(list); err != nil {
			return fmt.Errorf("%w: WithTiers: %w", ErrInvalidOption, err)
		}
		return nil
	})
}

// WithMaxTiers bounds the tier label without an allow-list: the first n distinct tiers
// seen (the empty tier, as "default", counts as one) keep their own label; later ones are
// counted under "other", except the empty tier, which gets "default" even after the limit.
// Default [DefaultMaxTiers] (32). n < 1 makes New fail with [ErrInvalidOption].
func WithMaxTiers(n int) Option {
	return optionFunc(func(c *config) error {
		if err := c.tiers.SetMaxTiers(n); err != nil {
			return fmt.Errorf("%w: WithMaxTiers: %w", ErrInvalidOption, err)
		}
		return nil
	})
}

// Recorder is a [metrics.Recorder] that exports the Scheduler's events as the Prometheus
// series the README's "Metrics" section lists, on a caller-given registerer. Create it with [New].
//
// All methods are safe for concurrent use and never block on I/O. For a tier already
// seen, Hit, Miss, Broken and Evicted cost one lock-free map lookup plus one atomic add
// and allocate nothing; the first event of a new tier takes a mutex and creates its
// series. Folded tiers ("other") take the lock-free path too once the label set is full.
type Recorder struct {
	hits, misses, broken, evictions *prometheus.CounterVec
	prompt, cached                  *prometheus.CounterVec
	parent                          *prometheus.CounterVec
	storeErrors                     *prometheus.CounterVec
	bindingsFn                      atomic.Pointer[func() int]

	// tiers folds a tier string to its label and resolved counters.
	tiers *metrics.TierLabels[*tierCounters]
}

// tierCounters are the pre-resolved children of one tier label.
type tierCounters struct {
	hits, misses, evictions prometheus.Counter
	prompt, cached          prometheus.Counter
	parent                  prometheus.Counter
	broken                  [metrics.NumReasons + 1]prometheus.Counter // index = Reason; [0] unused
}

var (
	_ metrics.Recorder       = (*Recorder)(nil)
	_ metrics.UsageRecorder  = (*Recorder)(nil)
	_ metrics.ParentRecorder = (*Recorder)(nil)
	_ metrics.StoreRecorder  = (*Recorder)(nil)
)

// New creates a Recorder and registers its nine series on reg (those below and
// agentserve_affinity_parent_placed_total{tier}):
// agentserve_affinity_hits_total{tier}, agentserve_affinity_misses_total{tier},
// agentserve_affinity_broken_total{tier,reason}, agentserve_affinity_evictions_total{tier},
// agentserve_affinity_prompt_tokens_total{tier},
// agentserve_affinity_cached_prompt_tokens_total{tier}, agentserve_affinity_bindings
// (see [Recorder.ObserveBindings]) and agentserve_affinity_store_errors_total{op} (see
// [Recorder.StoreError]).
//
// reg must be non-nil ([ErrNilRegisterer]); pass a prometheus.NewRegistry() or your own
// registry — New never uses the default registry. If a registration fails (for example a
// second Recorder on the same registry: prometheus.AlreadyRegisteredError, reachable with
// errors.As) New unregisters what it had registered and returns the error wrapped; it does
// not panic. Invalid options return [ErrInvalidOption]; nil options are ignored.
//
// Cost: call it once per registry; it creates the series of "other" and of every
// allow-listed tier (one child per counter, four for broken) up front.
func New(reg prometheus.Registerer, opts ...Option) (*Recorder, error) {
	if reg == nil {
		return nil, ErrNilRegisterer
	}
	cfg := config{tiers: metrics.TierLabelsConfig{MaxTiers: DefaultMaxTiers}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}

	r := &Recorder{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricHits,
			Help: "Requests served by the backend of the session's still-valid binding (affinity hits), by tier."},
			[]string{LabelTier}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricMisses,
			Help: "Requests placed by rendezvous hashing (new session, expired or broken binding, or affinity disabled), by tier."},
			[]string{LabelTier}),
		broken: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBroken,
			Help: "Bindings still within their TTL that could not be honoured, by tier and reason (down, unhealthy, not_candidate, overloaded)."},
			[]string{LabelTier, LabelReason}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricEvictions,
			Help: "Bindings evicted at the capacity limit (least recently used), by tier."},
			[]string{LabelTier}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPromptTokens,
			Help: "Prompt tokens of affinity hits as reported by the backend (usage.prompt_tokens; hits that reported cached tokens), by tier."},
			[]string{LabelTier}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCachedPromptTokens,
			Help: "Prompt tokens of affinity hits served from the backend's prefix cache (usage.prompt_tokens_details.cached_tokens), by tier."},
			[]string{LabelTier}),
		parent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricParentPlaced,
			Help: "First turns of a subagent session placed on its parent session's backend (also counted as misses), by tier."},
			[]string{LabelTier}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricStoreErrors,
			Help: "Failed calls to the shared binding store (Redis): request-path calls (each one decided from the local table instead), background refreshes and the subscription; plus calls that succeeded but repaired a key holding no binding (a wrong Redis type or an over-long value: answered by Redis, the key overwritten or deleted), by op."},
			[]string{LabelOp}),
	}
	bindings := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricBindings,
		Help: "Stored session-to-backend bindings (expired ones not yet reclaimed included), read at scrape time."}, r.readBindings)

	var registered []prometheus.Collector
	for _, c := range []struct {
		name string
		c    prometheus.Collector
	}{{MetricHits, r.hits}, {MetricMisses, r.misses}, {MetricBroken, r.broken}, {MetricEvictions, r.evictions},
		{MetricPromptTokens, r.prompt}, {MetricCachedPromptTokens, r.cached}, {MetricParentPlaced, r.parent}, {MetricBindings, bindings}, {MetricStoreErrors, r.storeErrors}} {
		if err := reg.Register(c.c); err != nil {
			for _, done := range registered {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("promaffinity: registering %s: %w", c.name, err)
		}
		registered = append(registered, c.c)
	}

	for _, op := range storeOps {
		r.storeErrors.WithLabelValues(op) // every op at 0 from the start
	}
	// "other" and the allow-listed tiers' series exist from the start.
	tiers, err := metrics.NewTierLabels(cfg.tiers, r.newTierCounters)
	if err != nil { // unreachable: the options were validated above
		for _, done := range registered {
			reg.Unregister(done)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	r.tiers = tiers
	return r, nil
}

func (r *Recorder) newTierCounters(label string) *tierCounters {
	tc := &tierCounters{
		hits:      r.hits.WithLabelValues(label),
		misses:    r.misses.WithLabelValues(label),
		evictions: r.evictions.WithLabelValues(label),
		prompt:    r.prompt.WithLabelValues(label),
		cached:    r.cached.WithLabelValues(label),
		parent:    r.parent.WithLabelValues(label),
	}
	for reason := metrics.ReasonDown; reason <= metrics.ReasonOverloaded; reason++ {
		tc.broken[reason] = r.broken.WithLabelValues(label, reason.String())
	}
	return tc
}

// resolve returns the counters of tier: lock-free and allocation-free for a tier already
// seen and for folded tiers once the label set is full.
func (r *Recorder) resolve(tier string) *tierCounters { return r.tiers.Resolve(tier) }

// Hit counts one affinity hit for tier. 0 allocs for a known tier.
func (r *Recorder) Hit(tier string) { r.resolve(tier).hits.Inc() }

// Miss counts one affinity miss for tier. 0 allocs for a known tier.
func (r *Recorder) Miss(tier string) { r.resolve(tier).misses.Inc() }

// Evicted counts one binding evicted at the capacity limit for tier. 0 allocs for a
// known tier.
func (r *Recorder) Evicted(tier string) { r.resolve(tier).evictions.Inc() }

// ParentPlaced counts one first turn placed on its parent session's backend for tier
// (also counted by Miss); it implements [metrics.ParentRecorder]. 0 allocs for a known tier.
func (r *Recorder) ParentPlaced(tier string) { r.resolve(tier).parent.Inc() }

// Broken counts one broken binding for tier and reason. An invalid reason (not one of
// metrics.ReasonDown, ReasonUnhealthy, ReasonNotCandidate, ReasonOverloaded) is a caller
// bug and is dropped, so the reason label keeps exactly its four values. 0 allocs for a known tier.
func (r *Recorder) Broken(tier string, reason metrics.Reason) {
	if !reason.Valid() {
		return
	}
	r.resolve(tier).broken[reason].Inc()
}

// Usage adds the prompt tokens of one affinity hit and the cached ones among them to
// agentserve_affinity_prompt_tokens_total and agentserve_affinity_cached_prompt_tokens_total
// (negative values count as 0; cached is capped at prompt, so the ratio stays <= 1).
// 0 allocs for a known tier.
func (r *Recorder) Usage(tier string, promptTokens, cachedPromptTokens int64) {
	p := max(promptTokens, 0)
	c := min(max(cachedPromptTokens, 0), p)
	tc := r.resolve(tier)
	tc.prompt.Add(float64(p))
	tc.cached.Add(float64(c))
}

// ObserveBindings makes agentserve_affinity_bindings report fn() at every scrape (e.g.
// sched.Len, which counts expired bindings not yet reclaimed and costs O(shards) locks).
// Before it is called, or after ObserveBindings(nil), the gauge is 0. fn is called on the
// scraping goroutine, so it must be safe for concurrent use and fast. Safe to call at any
// time, concurrently with scrapes; one atomic store.
func (r *Recorder) ObserveBindings(fn func() int) {
	if fn == nil {
		r.bindingsFn.Store(nil)
		return
	}
	r.bindingsFn.Store(&fn)
}

func (r *Recorder) readBindings() float64 {
	if fn := r.bindingsFn.Load(); fn != nil {
		return float64((*fn)())
	}
	return 0
}

// Label returns the tier label value events for tier are (or would now be) counted
// under: "default" for "", the tier itself if kept, otherwise "other". It does not create
// a label. Safe for concurrent use; lock-free, one map lookup, 0 allocs.
func (r *Recorder) Label(tier string) string { return r.tiers.Label(tier) }
