package metrics

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Tier label values and limits shared by the metric adapters ([TierLabels]).
const (
	// DefaultTierLabel is the label of the empty tier "". A tier literally named
	// "default" shares it.
	DefaultTierLabel = "default"
	// MaxTierLabelBytes is the longest tier [TierLabels] keeps as a label value; longer
	// tiers fold to [OtherTier].
	MaxTierLabelBytes = 128
)

// ErrInvalidTierLabels is returned by [NewTierLabels] for a config it cannot honour: a
// nil build func, MaxTiers < 1 without an allow-list, or an allow-listed tier that is
// not a valid label ([ValidTierLabel]). The message names the offending value.
var ErrInvalidTierLabels = errors.New("metrics: invalid tier labels config")

// ValidTierLabel reports whether tier may be kept as a label value: valid UTF-8 and at
// most [MaxTierLabelBytes] bytes. The empty tier is valid (it is labelled "default").
// O(len(tier)), 0 allocs.
func ValidTierLabel(tier string) bool {
	return len(tier) <= MaxTierLabelBytes && utf8.ValidString(tier)
}

// TierLabelsConfig says which tiers a [TierLabels] keeps as their own label.
type TierLabelsConfig struct {
	// Allow is the allow-list, used only when HasAllow is true: exactly these tiers (and
	// the empty tier, always, as "default") keep their label; every other tier is folded
	// to "other". An empty list with HasAllow keeps only "default" and "other".
	Allow []string
	// HasAllow selects the allow-list; MaxTiers is then ignored.
	HasAllow bool
	// MaxTiers bounds the labels without an allow-list: the first MaxTiers distinct
	// tiers seen (the empty tier, as "default", counts as one) keep their label; later
	// ones fold to "other", except the empty tier, which gets "default" even after the
	// limit. Must be >= 1 when HasAllow is false.
	MaxTiers int
}

// SetAllow sets a copy of allow as the allow-list (HasAllow = true). It returns an error
// wrapping [ErrInvalidTierLabels] and naming the tier, leaving c unchanged, when a tier is
// not [ValidTierLabel]. Not safe for concurrent use; O(len(allow)).
func (c *TierLabelsConfig) SetAllow(allow []string) error {
	for _, t := range allow {
		if !ValidTierLabel(t) {
			return fmt.Errorf("%w: tier %q is not valid UTF-8 or longer than %d bytes", ErrInvalidTierLabels, t, MaxTierLabelBytes)
		}
	}
	c.Allow = append([]string(nil), allow...)
	c.HasAllow = true
	return nil
}

// SetMaxTiers sets MaxTiers. It returns an error wrapping [ErrInvalidTierLabels], leaving
// c unchanged, when n < 1 (even with an allow-list, where MaxTiers is ignored, so that a
// bad value is never silently accepted). Not safe for concurrent use.
func (c *TierLabelsConfig) SetMaxTiers(n int) error {
	if n < 1 {
		return fmt.Errorf("%w: MaxTiers %d, want >= 1", ErrInvalidTierLabels, n)
	}
	c.MaxTiers = n
	return nil
}

// TierLabels folds the unbounded tier strings of events into a bounded set of label
// values and keeps one payload of type T per kept tier — typically a metric adapter's
// pre-resolved counters or attribute sets, so an event needs no label formatting.
//
// Folding: the empty tier is labelled [DefaultTierLabel]; a tier is kept as its own label
// if it is allow-listed, or, without an allow-list, among the first MaxTiers distinct
// tiers seen; every other tier, and any tier that is not [ValidTierLabel], shares the
// payload of [OtherTier]. A tier literally named "other" (or "default") shares that
// label's series: build is then called again with the same label, and the adapter's
// metric library is expected to return the same series for equal labels.
//
// Concurrency: safe for concurrent use. Known tiers are read from an immutable map behind
// an atomic pointer (lock-free); the first sighting of a new tier takes a mutex, calls
// build once and replaces the map copy-on-write (O(kept tiers)), so the write cost is
// paid at most MaxTiers+1 times over the TierLabels' life.
type TierLabels[T any] struct {
	tiers atomic.Pointer[map[string]T] // immutable once stored; replaced under mu
	full  atomic.Bool                  // no new label can be added (always with an allow-list)
	mu    sync.Mutex
	kept  int // distinct labels created without an allow-list (under mu)
	max   int
	other T
	build func(label string) T
}

// NewTierLabels returns a TierLabels configured by cfg. build makes the payload of one
// label value; it is called at once for "other" and for every allow-listed tier, later
// (under the TierLabels' mutex) for each newly kept tier, and never on the read path.
// build must not call back into the TierLabels.
//
// Errors: [ErrInvalidTierLabels] (wrapped, with the offending value) for a nil build,
// MaxTiers < 1 without an allow-list, or an allow-listed tier that is not
// [ValidTierLabel]. The allow-list is copied; cfg may be reused.
func NewTierLabels[T any](cfg TierLabelsConfig, build func(label string) T) (*TierLabels[T], error) {
	if build == nil {
		return nil, fmt.Errorf("%w: nil build func", ErrInvalidTierLabels)
	}
	if !cfg.HasAllow && cfg.MaxTiers < 1 {
		return nil, fmt.Errorf("%w: MaxTiers %d, want >= 1", ErrInvalidTierLabels, cfg.MaxTiers)
	}
	for _, t := range cfg.Allow {
		if cfg.HasAllow && !ValidTierLabel(t) {
			return nil, fmt.Errorf("%w: allow-listed tier %q is not valid UTF-8 or longer than %d bytes",
				ErrInvalidTierLabels, t, MaxTierLabelBytes)
		}
	}
	l := &TierLabels[T]{max: cfg.MaxTiers, build: build}
	// "other" exists from the start so a folded tier never needs the lock.
	l.other = build(OtherTier)
	m := map[string]T{OtherTier: l.other}
	if cfg.HasAllow {
		for _, t := range cfg.Allow {
			label := t
			if t == "" {
				label = DefaultTierLabel
			}
			if _, ok := m[t]; !ok {
				m[strings.Clone(t)] = build(label)
			}
		}
		l.full.Store(true)
	}
	l.tiers.Store(&m)
	return l, nil
}

// Resolve returns the payload events for tier are counted under, creating tier's label
// (one build call) on its first sighting if it is still kept. Lock-free and 0 allocs for
// a tier already seen and for folded tiers once the label set is full: one map lookup,
// plus a UTF-8 check for an unknown tier.
func (l *TierLabels[T]) Resolve(tier string) T {
	if p, ok := (*l.tiers.Load())[tier]; ok {
		return p
	}
	if tier != "" && l.full.Load() {
		return l.other
	}
	if !ValidTierLabel(tier) {
		return l.other
	}
	return l.add(tier)
}

// add creates tier's label under the lock. The empty tier is always kept, as "default";
// without an allow-list it counts as one of the max distinct tiers.
func (l *TierLabels[T]) add(tier string) T {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.tiers.Load()
	if p, ok := old[tier]; ok {
		return p
	}
	label := tier
	switch {
	case tier == "":
		label = DefaultTierLabel
		if !l.full.Load() {
			l.kept++
		}
	case l.full.Load():
		return l.other
	default:
		l.kept++
	}
	if l.kept >= l.max {
		l.full.Store(true)
	}
	p := l.build(label)
	m := make(map[string]T, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[strings.Clone(tier)] = p // the caller's string may alias a reused buffer
	l.tiers.Store(&m)
	return p
}

// Label returns the label value events for tier are (or would now be) counted under:
// "default" for "", the tier itself if kept or still keepable, otherwise "other". It
// creates no label. Safe for concurrent use; lock-free, one map lookup, 0 allocs.
func (l *TierLabels[T]) Label(tier string) string {
	if tier == "" {
		return DefaultTierLabel
	}
	if _, ok := (*l.tiers.Load())[tier]; ok {
		return tier
	}
	if l.full.Load() || !ValidTierLabel(tier) {
		return OtherTier
	}
	return tier
}
