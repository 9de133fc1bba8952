package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultMaxTiers is the number of distinct tiers a [Counters] keeps apart when
// [WithMaxTiers] is not given (or is given a value < 1).
const DefaultMaxTiers = 64

// OtherTier is the tier name under which [Counters] folds the events of tiers seen after
// the distinct-tier limit was reached. A tier literally named "other" shares its counters.
const OtherTier = "other"

// TierCounts is a point-in-time copy of one tier's counters (or of their sum, see
// [Counters.Total]). It is plain data: comparable, safe to copy and to keep.
type TierCounts struct {
	Hits      uint64 // requests served by a still-valid binding
	Misses    uint64 // requests placed by rendezvous hashing
	Evictions uint64 // bindings evicted at the capacity limit
	// Broken counts broken bindings indexed by Reason: Broken[ReasonDown],
	// Broken[ReasonUnhealthy], Broken[ReasonNotCandidate], Broken[ReasonOverloaded].
	// Index 0 counts calls made
	// with an invalid Reason (a caller bug; it stays 0 in correct programs).
	Broken [NumReasons + 1]uint64
	// PromptTokens and CachedPromptTokens sum the usage reported for affinity hits
	// ([UsageRecorder]); CachedPromptTokens / PromptTokens is the tier's achieved reuse.
	PromptTokens, CachedPromptTokens uint64
}

// Reuse returns CachedPromptTokens / PromptTokens, or 0 when no usage was reported.
func (t TierCounts) Reuse() float64 {
	if t.PromptTokens == 0 {
		return 0
	}
	return float64(t.CachedPromptTokens) / float64(t.PromptTokens)
}

// BrokenTotal returns the number of broken bindings over all reasons (including index 0).
func (t TierCounts) BrokenTotal() uint64 {
	var n uint64
	for _, v := range t.Broken {
		n += v
	}
	return n
}

// HitRate returns Hits / (Hits + Misses), or 0 when there were no requests.
func (t TierCounts) HitRate() float64 {
	if t.Hits+t.Misses == 0 {
		return 0
	}
	return float64(t.Hits) / float64(t.Hits+t.Misses)
}

func (t *TierCounts) add(u TierCounts) {
	t.Hits += u.Hits
	t.Misses += u.Misses
	t.Evictions += u.Evictions
	for i := range t.Broken {
		t.Broken[i] += u.Broken[i]
	}
	t.PromptTokens += u.PromptTokens
	t.CachedPromptTokens += u.CachedPromptTokens
}

// tierCounters are the live counters of one tier.
type tierCounters struct {
	hits, misses, evictions atomic.Uint64
	broken                  [NumReasons + 1]atomic.Uint64
	prompt, cached          atomic.Uint64
}

func (tc *tierCounters) load() TierCounts {
	t := TierCounts{
		Hits:      tc.hits.Load(),
		Misses:    tc.misses.Load(),
		Evictions: tc.evictions.Load(),
		// cached first: read after prompt it could exceed it while events are recorded.
		CachedPromptTokens: tc.cached.Load(),
		PromptTokens:       tc.prompt.Load(),
	}
	for i := range tc.broken {
		t.Broken[i] = tc.broken[i].Load()
	}
	return t
}

// tierTable is an immutable snapshot of the tier -> counters index. It is replaced
// (copy-on-write) when a tier is added; the counters it points to are shared.
type tierTable struct {
	byTier map[string]*tierCounters
	other  *tierCounters // non-nil once the table is full
}

// Option configures [NewCounters].
type Option interface{ apply(*Counters) }

type maxTiersOption int

func (o maxTiersOption) apply(c *Counters) { c.maxTiers = int(o) }

// WithMaxTiers bounds the number of distinct tiers that get their own counters to n.
// Events for further tiers are counted under [OtherTier], which does not count towards
// n. n < 1 means [DefaultMaxTiers].
func WithMaxTiers(n int) Option { return maxTiersOption(n) }

// Counters is a [Recorder] that keeps in-memory atomic counters per tier. The zero value
// is ready to use (with [DefaultMaxTiers]); [NewCounters] sets options. A Counters must not
// be copied after first use.
//
// Concurrency and cost: all methods are safe for concurrent use. Recording an event for a
// tier already seen (or once the tier limit is reached, for any tier) is one atomic load,
// one map lookup and one atomic add: no lock, no allocation. The first event of a new
// tier takes a mutex and copies the tier index (O(tiers), at most max tiers + 1 times over
// the Counters' life). Memory is O(max tiers).
type Counters struct {
	maxTiers int // < 1 means DefaultMaxTiers; fixed before first use
	table    atomic.Pointer[tierTable]
	mu       sync.Mutex // serializes writers of table
}

// NewCounters returns empty Counters configured by opts; nil options are ignored.
func NewCounters(opts ...Option) *Counters {
	c := &Counters{}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// MaxTiers returns the distinct-tier limit in effect.
func (c *Counters) MaxTiers() int {
	if c.maxTiers < 1 {
		return DefaultMaxTiers
	}
	return c.maxTiers
}

// tier returns the counters for tier, creating them on first use.
func (c *Counters) tier(tier string) *tierCounters {
	if t := c.table.Load(); t != nil {
		if tc, ok := t.byTier[tier]; ok {
			return tc
		}
		if t.other != nil {
			return t.other
		}
	}
	return c.addTier(tier)
}

// addTier is the slow path of tier: under the mutex, re-check and copy-on-write.
func (c *Counters) addTier(tier string) *tierCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.table.Load()
	if old == nil {
		old = &tierTable{}
	}
	if tc, ok := old.byTier[tier]; ok {
		return tc
	}
	if old.other != nil {
		return old.other
	}
	next := &tierTable{byTier: make(map[string]*tierCounters, len(old.byTier)+1)}
	for k, v := range old.byTier {
		next.byTier[k] = v
	}
	var tc *tierCounters
	if len(old.byTier) < c.MaxTiers() {
		tc = &tierCounters{}
		// Copy: the caller may hand us a string backed by a reused buffer.
		next.byTier[strings.Clone(tier)] = tc
	} else {
		// Full: from now on unknown tiers go to "other" without taking the lock. A
		// real tier named "other" already present keeps its counters and is shared.
		tc = next.byTier[OtherTier]
		if tc == nil {
			tc = &tierCounters{}
			next.byTier[OtherTier] = tc
		}
		next.other = tc
	}
	c.table.Store(next)
	return tc
}

// Hit counts an affinity hit for tier. 0 allocs, lock-free on the steady path.
func (c *Counters) Hit(tier string) { c.tier(tier).hits.Add(1) }

// Miss counts an affinity miss for tier. 0 allocs, lock-free on the steady path.
func (c *Counters) Miss(tier string) { c.tier(tier).misses.Add(1) }

// Evicted counts an eviction for tier. 0 allocs, lock-free on the steady path.
func (c *Counters) Evicted(tier string) { c.tier(tier).evictions.Add(1) }

// Broken counts a broken binding for tier and reason. An invalid reason is counted at
// index 0 of [TierCounts.Broken]. 0 allocs, lock-free on the steady path.
func (c *Counters) Broken(tier string, reason Reason) {
	i := int(reason)
	if !reason.Valid() {
		i = 0
	}
	c.tier(tier).broken[i].Add(1)
}

// Usage adds the prompt and cached prompt tokens of one affinity hit to tier's counters
// (negative values count as 0; cached is capped at prompt). 0 allocs, lock-free on the
// steady path.
func (c *Counters) Usage(tier string, promptTokens, cachedPromptTokens int64) {
	p, k := clampUsage(promptTokens, cachedPromptTokens)
	tc := c.tier(tier)
	tc.prompt.Add(p)
	tc.cached.Add(k)
}

// clampUsage returns prompt and cached as unsigned counts: negatives are 0, cached is at
// most prompt.
func clampUsage(prompt, cached int64) (uint64, uint64) {
	prompt = max(prompt, 0)
	cached = min(max(cached, 0), prompt)
	return uint64(prompt), uint64(cached)
}

// Snapshot returns a new map from tier name to a copy of its counts; changing it does not
// affect c. Folded tiers appear under [OtherTier]. Each counter is read atomically, but the
// snapshot is not one atomic cut across counters taken while events are being recorded.
// Cost: O(tiers), allocates the map.
func (c *Counters) Snapshot() map[string]TierCounts {
	t := c.table.Load()
	if t == nil {
		return map[string]TierCounts{}
	}
	m := make(map[string]TierCounts, len(t.byTier))
	for k, tc := range t.byTier {
		m[k] = tc.load()
	}
	return m
}

// Tier returns the counts recorded under the tier name (all zero if none were). A tier
// folded into [OtherTier] reads as zero under its own name. Cost: one map lookup, 0 allocs.
func (c *Counters) Tier(tier string) TierCounts {
	if t := c.table.Load(); t != nil {
		if tc, ok := t.byTier[tier]; ok {
			return tc.load()
		}
	}
	return TierCounts{}
}

// Total returns the sum of the counts of every tier. Same consistency as [Counters.Snapshot].
// Cost: O(tiers), 0 allocs.
func (c *Counters) Total() TierCounts {
	var sum TierCounts
	if t := c.table.Load(); t != nil {
		for _, tc := range t.byTier {
			sum.add(tc.load())
		}
	}
	return sum
}
