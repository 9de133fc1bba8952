package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentserve/sessionaffinity/metrics"
)

// Instrument names (OpenTelemetry semantic-convention style: dot-separated, no _total
// suffix, the unit in the instrument's unit field). An OTel-to-Prometheus exporter turns
// agentserve.affinity.hits with unit "{request}" into agentserve_affinity_hits_total.
const (
	MetricHits         = "agentserve.affinity.hits"          // Int64Counter {tier}
	MetricMisses       = "agentserve.affinity.misses"        // Int64Counter {tier}
	MetricBroken       = "agentserve.affinity.broken"        // Int64Counter {tier, reason}
	MetricEvictions    = "agentserve.affinity.evictions"     // Int64Counter {tier}
	MetricParentPlaced = "agentserve.affinity.parent_placed" // Int64Counter {tier}
	MetricBindings     = "agentserve.affinity.bindings"      // Int64ObservableGauge, no attributes
	// MetricPromptTokens and MetricCachedPromptTokens count the prompt tokens of affinity
	// hits and how many of them the backend served from its prefix cache
	// ([metrics.UsageRecorder]: only hits whose backend reported its cached tokens); their
	// ratio is the tier's achieved reuse.
	MetricPromptTokens       = "agentserve.affinity.prompt_tokens"        // Int64Counter {tier}
	MetricCachedPromptTokens = "agentserve.affinity.cached_prompt_tokens" // Int64Counter {tier}
	// MetricStoreErrors counts failed calls to a shared binding store (a request-path
	// call made the Scheduler decide from its local table) and calls that succeeded but
	// repaired a key holding no binding (redisstore: a wrong Redis type or an over-long
	// value; answered by the store, not decided locally), by op ([metrics.StoreRecorder]).
	MetricStoreErrors = "agentserve.affinity.store_errors" // Int64Counter {op}
)

// ScopeName is the instrumentation scope (meter name) the instruments are created under.
const ScopeName = "github.com/agentserve/sessionaffinity/metrics/otel"

// Attribute keys and special tier values, identical to the Prometheus adapter's labels.
const (
	// AttrTier is the tier attribute of every counter.
	AttrTier = "tier"
	// AttrReason is the reason attribute of MetricBroken: "down", "unhealthy",
	// "not_candidate" or "overloaded" (metrics.Reason.String).
	AttrReason = "reason"
	// AttrOp is the op attribute of MetricStoreErrors: one of the metrics.StoreOp* values
	// (claim, rebind, refresh, forget, watch); any other value is counted as "other".
	AttrOp = "op"
	// TierDefault is the attribute value of the empty tier "".
	TierDefault = "default"
	// TierOther is the value every folded tier is counted under: tiers outside the
	// allow-list, beyond the first MaxTiers distinct ones, not valid UTF-8 or longer
	// than MaxTierAttrBytes.
	TierOther = "other"
	// DefaultMaxTiers is the number of distinct tier values kept without an allow-list.
	DefaultMaxTiers = 32
	// MaxTierAttrBytes is the longest tier kept as an attribute value.
	MaxTierAttrBytes = metrics.MaxTierLabelBytes
)

// Errors returned by [New].
var (
	// ErrNilMeterProvider: New was given a nil metric.MeterProvider. The adapter never
	// falls back to the global provider (otel.GetMeterProvider).
	ErrNilMeterProvider = errors.New("otelaffinity: nil metric.MeterProvider")
	// ErrInvalidOption: an option was given an invalid value (wrapped with the value).
	ErrInvalidOption = errors.New("otelaffinity: invalid option")
)

// Option configures [New].
type Option interface{ apply(*config) error }

type config struct{ tiers metrics.TierLabelsConfig }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// WithTiers sets an allow-list of tiers kept as attribute values; every other tier is
// counted under "other". The empty tier is always kept, as "default". Tiers that are not
// valid UTF-8 or longer than [MaxTierAttrBytes] make New fail with [ErrInvalidOption].
// With an allow-list, WithMaxTiers is ignored.
func WithTiers(allow ...string) Option {
	list := append([]string(nil), allow...)
	return optionFunc(func(c *config) error {
		if err := c.tiers.SetAllow(list); err != nil {
			return fmt.Errorf("%w: WithTiers: %w", ErrInvalidOption, err)
		}
		return nil
	})
}

// WithMaxTiers bounds the tier attribute without an allow-list: the first n distinct
// tiers seen (the empty tier, as "default", counts as one) keep their own value; later
// ones are counted under "other" (the empty tier always gets "default"). Default
// [DefaultMaxTiers] (32). n < 1 makes New fail with [ErrInvalidOption].
func WithMaxTiers(n int) Option {
	return optionFunc(func(c *config) error {
		if err := c.tiers.SetMaxTiers(n); err != nil {
			return fmt.Errorf("%w: WithMaxTiers: %w", ErrInvalidOption, err)
		}
		return nil
	})
}

// Recorder is a [metrics.Recorder] that records the Scheduler's events on OpenTelemetry
// instruments created from a caller-given metric.MeterProvider. Create it with [New];
// call [Recorder.Close] to unregister the bindings gauge's callback.
//
// All methods are safe for concurrent use and never block on I/O (the SDK aggregates in
// memory; exporters run on their own schedule). For a tier already seen, an event costs
// one lock-free map lookup plus the SDK's Add with a pre-built attribute set; a tier's
// first event takes a mutex once.
type Recorder struct {
	hits, misses, broken, evictions, parent metric.Int64Counter
	prompt, cached, storeErrors             metric.Int64Counter
	ops                                     map[string][]metric.AddOption // op attribute sets, read-only after New
	bindingsFn                              atomic.Pointer[func() int]
	mu                                      sync.Mutex // guards reg
	reg                                     metric.Registration

	// tiers folds a tier string to its attribute value and pre-built attributes.
	tiers *metrics.TierLabels[*tierAttrs]
}

// tierAttrs are the pre-built measurement options of one tier value.
// They are kept as ready []metric.AddOption slices so Add's variadic argument needs no
// allocation per event.
type tierAttrs struct {
	tier   []metric.AddOption
	broken [metrics.NumReasons + 1][]metric.AddOption // index = Reason; [0] unused
}

var (
	_ metrics.Recorder       = (*Recorder)(nil)
	_ metrics.UsageRecorder  = (*Recorder)(nil)
	_ metrics.StoreRecorder  = (*Recorder)(nil)
	_ metrics.ParentRecorder = (*Recorder)(nil)
)

// storeOps are the op attribute values of MetricStoreErrors; anything else is "other".
func storeOps() map[string][]metric.AddOption {
	m := map[string][]metric.AddOption{}
	for _, op := range []string{metrics.StoreOpClaim, metrics.StoreOpRebind, metrics.StoreOpRefresh,
		metrics.StoreOpForget, metrics.StoreOpWatch, TierOther} {
		m[op] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrOp, op)))}
	}
	return m
}

// New creates the instruments agentserve.affinity.hits, .misses, .broken, .evictions,
// .parent_placed, .prompt_tokens, .cached_prompt_tokens, .store_errors (Int64Counters) and .bindings (Int64ObservableGauge reading the func
// given to [Recorder.ObserveBindings] at collection time) on mp.Meter([ScopeName]).
//
// mp must be non-nil ([ErrNilMeterProvider]); New never reads the global provider.
// Instrument creation errors from the provider are returned wrapped. Invalid options
// return [ErrInvalidOption]; nil options are ignored. Call it once per provider.
func New(mp metric.MeterProvider, opts ...Option) (*Recorder, error) {
	if mp == nil {
		return nil, ErrNilMeterProvider
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
	m := mp.Meter(ScopeName)
	r := &Recorder{}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			err = fmt.Errorf("otelaffinity: creating %s: %w", name, err)
		}
		return c
	}
	r.hits = counter(MetricHits, "{request}", "Requests served by the backend of the session's still-valid binding (affinity hits), by tier.")
	r.misses = counter(MetricMisses, "{request}", "Requests placed by rendezvous hashing (new session, expired or broken binding, or affinity disabled), by tier.")
	r.broken = counter(MetricBroken, "{binding}", "Bindings still within their TTL that could not be honoured, by tier and reason (down, unhealthy, not_candidate).")
	r.evictions = counter(MetricEvictions, "{binding}", "Bindings evicted at the capacity limit (least recently used), by tier.")
	r.parent = counter(MetricParentPlaced, "{request}", "First turns of a subagent session placed on its parent session's backend (also counted as misses), by tier.")
	r.prompt = counter(MetricPromptTokens, "{token}", "Prompt tokens of affinity hits whose backend reported usage with cached tokens, by tier.")
	r.cached = counter(MetricCachedPromptTokens, "{token}", "Prompt tokens of affinity hits the backend served from its prefix cache, by tier.")
	r.storeErrors = counter(MetricStoreErrors, "{call}", "Failed calls to the shared binding store: request-path calls (each decided from the local table instead), background refreshes and the subscription; plus calls that succeeded but repaired a key holding no binding (a wrong type or an over-long value: answered by the store, the key overwritten or deleted), by op.")
	r.ops = storeOps()
	if err != nil {
		return nil, err
	}
	gauge, err := m.Int64ObservableGauge(MetricBindings, metric.WithUnit("{binding}"),
		metric.WithDescription("Stored session-to-backend bindings (expired ones not yet reclaimed included), read at collection time."))
	if err != nil {
		return nil, fmt.Errorf("otelaffinity: creating %s: %w", MetricBindings, err)
	}
	r.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(gauge, r.readBindings())
		return nil
	}, gauge)
	if err != nil {
		return nil, fmt.Errorf("otelaffinity: registering %s callback: %w", MetricBindings, err)
	}

	r.tiers, err = metrics.NewTierLabels(cfg.tiers, newTierAttrs)
	if err != nil { // unreachable: the options were validated above
		_ = r.reg.Unregister()
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return r, nil
}

func newTierAttrs(value string) *tierAttrs {
	ta := &tierAttrs{tier: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrTier, value)))}}
	for reason := metrics.ReasonDown; reason <= metrics.NumReasons; reason++ {
		ta.broken[reason] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String(AttrTier, value), attribute.String(AttrReason, reason.String())))}
	}
	return ta
}

// resolve returns the attributes of tier: lock-free for a tier already seen and for
// folded tiers once the value set is full.
func (r *Recorder) resolve(tier string) *tierAttrs { return r.tiers.Resolve(tier) }

// Hit counts one affinity hit for tier.
func (r *Recorder) Hit(tier string) { r.hits.Add(context.Background(), 1, r.resolve(tier).tier...) }

// Miss counts one affinity miss for tier.
func (r *Recorder) Miss(tier string) { r.misses.Add(context.Background(), 1, r.resolve(tier).tier...) }

// Evicted counts one binding evicted at the capacity limit for tier.
func (r *Recorder) Evicted(tier string) {
	r.evictions.Add(context.Background(), 1, r.resolve(tier).tier...)
}

// ParentPlaced counts one first turn placed on its parent session's backend for tier
// (the Scheduler also counts it as a Miss). It implements [metrics.ParentRecorder].
func (r *Recorder) ParentPlaced(tier string) {
	r.parent.Add(context.Background(), 1, r.resolve(tier).tier...)
}

// Usage adds the prompt tokens of one affinity hit and how many of them the backend served
// from its prefix cache to tier's counters. Negative values count as 0 and cached is
// capped at prompt, so the ratio stays within [0, 1]. It implements
// [metrics.UsageRecorder]. 0 allocs for a tier already seen.
func (r *Recorder) Usage(tier string, promptTokens, cachedPromptTokens int64) {
	prompt := max(promptTokens, 0)
	cached := min(max(cachedPromptTokens, 0), prompt)
	ta := r.resolve(tier)
	r.prompt.Add(context.Background(), prompt, ta.tier...)
	r.cached.Add(context.Background(), cached, ta.tier...)
}

// StoreError counts one failed call to the shared binding store, or one key a
// successful call repaired; op is one of the metrics.StoreOp* values (any other value is
// counted as "other", so the attribute stays bounded). It implements [metrics.StoreRecorder]. 0 allocs.
func (r *Recorder) StoreError(op string) {
	opts, ok := r.ops[op]
	if !ok {
		opts = r.ops[TierOther]
	}
	r.storeErrors.Add(context.Background(), 1, opts...)
}

// Broken counts one broken binding for tier and reason. An invalid reason is a caller
// bug and is dropped, so the reason attribute keeps exactly the metrics.Reason values.
func (r *Recorder) Broken(tier string, reason metrics.Reason) {
	if !reason.Valid() {
		return
	}
	r.broken.Add(context.Background(), 1, r.resolve(tier).broken[reason]...)
}

// ObserveBindings makes agentserve.affinity.bindings report fn() at every collection
// (e.g. sched.Len). Before it is called, or after ObserveBindings(nil), the gauge reports
// 0. fn runs on the collecting goroutine: it must be safe for concurrent use and fast.
// Safe to call at any time; one atomic store.
func (r *Recorder) ObserveBindings(fn func() int) {
	if fn == nil {
		r.bindingsFn.Store(nil)
		return
	}
	r.bindingsFn.Store(&fn)
}

func (r *Recorder) readBindings() int64 {
	if fn := r.bindingsFn.Load(); fn != nil {
		return int64((*fn)())
	}
	return 0
}

// Close unregisters the bindings gauge's callback, so the provider no longer calls the
// ObserveBindings func. Counters keep working. Idempotent; safe for concurrent use.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reg == nil {
		return nil
	}
	err := r.reg.Unregister()
	r.reg = nil
	return err
}

// Tier returns the tier attribute value events for tier are (or would now be) counted
// under: "default" for "", the tier itself if kept, otherwise "other". It does not create
// a value. Safe for concurrent use; lock-free, 0 allocs.
func (r *Recorder) Tier(tier string) string { return r.tiers.Label(tier) }
