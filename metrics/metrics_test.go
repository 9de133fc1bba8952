package metrics_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	_ metrics.Recorder = metrics.Noop{}
	_ metrics.Recorder = (*metrics.Counters)(nil)
	_ metrics.Recorder = (*metrics.Recording)(nil)
)

func TestReasonString(t *testing.T) {
	tests := []struct {
		r     metrics.Reason
		want  string
		valid bool
	}{
		{metrics.ReasonDown, "down", true},
		{metrics.ReasonUnhealthy, "unhealthy", true},
		{metrics.ReasonNotCandidate, "not_candidate", true},
		{metrics.ReasonOverloaded, "overloaded", true},
		{0, "Reason(0)", false},
		{5, "Reason(5)", false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.r.String())
			assert.Equal(t, tt.valid, tt.r.Valid())
		})
	}
}

func TestKindAndEventString(t *testing.T) {
	tests := []struct {
		e    metrics.Event
		want string
	}{
		{metrics.Event{Kind: metrics.KindHit, Tier: "gold"}, `hit tier="gold"`},
		{metrics.Event{Kind: metrics.KindMiss}, `miss tier=""`},
		{metrics.Event{Kind: metrics.KindBroken, Tier: "t", Reason: metrics.ReasonNotCandidate}, `broken tier="t" reason=not_candidate`},
		{metrics.Event{Kind: metrics.KindEvicted, Tier: "x"}, `evicted tier="x"`},
		{metrics.Event{Kind: 9, Tier: "x"}, `Kind(9) tier="x"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.e.String())
		})
	}
}

func TestNoopAllocs(t *testing.T) {
	var r metrics.Recorder = metrics.Noop{}
	allocs := testing.AllocsPerRun(100, func() {
		r.Hit("t")
		r.Miss("t")
		r.Broken("t", metrics.ReasonDown)
		r.Evicted("t")
	})
	assert.Equal(t, 0.0, allocs)
}

// apply feeds a script of events to r.
func apply(r metrics.Recorder, events []metrics.Event) {
	for _, e := range events {
		switch e.Kind {
		case metrics.KindHit:
			r.Hit(e.Tier)
		case metrics.KindMiss:
			r.Miss(e.Tier)
		case metrics.KindBroken:
			r.Broken(e.Tier, e.Reason)
		case metrics.KindEvicted:
			r.Evicted(e.Tier)
		}
	}
}

func hit(tier string) metrics.Event  { return metrics.Event{Kind: metrics.KindHit, Tier: tier} }
func miss(tier string) metrics.Event { return metrics.Event{Kind: metrics.KindMiss, Tier: tier} }
func evict(tier string) metrics.Event {
	return metrics.Event{Kind: metrics.KindEvicted, Tier: tier}
}
func broken(tier string, r metrics.Reason) metrics.Event {
	return metrics.Event{Kind: metrics.KindBroken, Tier: tier, Reason: r}
}

func TestCounters(t *testing.T) {
	tests := []struct {
		name      string
		opts      []metrics.Option
		events    []metrics.Event
		wantSnap  map[string]metrics.TierCounts
		wantTotal metrics.TierCounts
	}{
		{
			name:      "empty",
			wantSnap:  map[string]metrics.TierCounts{},
			wantTotal: metrics.TierCounts{},
		},
		{
			name: "one tier all kinds",
			events: []metrics.Event{
				miss(""), hit(""), hit(""), broken("", metrics.ReasonDown),
				broken("", metrics.ReasonNotCandidate), broken("", metrics.ReasonDown), evict(""),
			},
			wantSnap: map[string]metrics.TierCounts{
				"": {Hits: 2, Misses: 1, Evictions: 1, Broken: [metrics.NumReasons + 1]uint64{0, 2, 0, 1}},
			},
			wantTotal: metrics.TierCounts{Hits: 2, Misses: 1, Evictions: 1, Broken: [metrics.NumReasons + 1]uint64{0, 2, 0, 1}},
		},
		{
			name: "two tiers",
			events: []metrics.Event{
				miss("gold"), hit("gold"), miss("free"), broken("free", metrics.ReasonUnhealthy),
				evict("free"), hit("gold"),
			},
			wantSnap: map[string]metrics.TierCounts{
				"gold": {Hits: 2, Misses: 1},
				"free": {Misses: 1, Evictions: 1, Broken: [metrics.NumReasons + 1]uint64{0, 0, 1, 0}},
			},
			wantTotal: metrics.TierCounts{Hits: 2, Misses: 2, Evictions: 1, Broken: [metrics.NumReasons + 1]uint64{0, 0, 1, 0}},
		},
		{
			name:   "invalid reason counted at index 0",
			events: []metrics.Event{broken("t", 0), broken("t", 200)},
			wantSnap: map[string]metrics.TierCounts{
				"t": {Broken: [metrics.NumReasons + 1]uint64{2, 0, 0, 0}},
			},
			wantTotal: metrics.TierCounts{Broken: [metrics.NumReasons + 1]uint64{2, 0, 0, 0}},
		},
		{
			name: "fold beyond max tiers",
			opts: []metrics.Option{metrics.WithMaxTiers(2)},
			events: []metrics.Event{
				hit("a"), hit("b"), hit("c"), miss("d"), hit("a"), miss("c"), evict("b"),
			},
			wantSnap: map[string]metrics.TierCounts{
				"a":     {Hits: 2},
				"b":     {Hits: 1, Evictions: 1},
				"other": {Hits: 1, Misses: 2},
			},
			wantTotal: metrics.TierCounts{Hits: 4, Misses: 2, Evictions: 1},
		},
		{
			name: "real tier named other shares the fold bucket",
			opts: []metrics.Option{metrics.WithMaxTiers(1)},
			events: []metrics.Event{
				hit("other"), hit("x"), miss("y"),
			},
			wantSnap: map[string]metrics.TierCounts{
				"other": {Hits: 2, Misses: 1},
			},
			wantTotal: metrics.TierCounts{Hits: 2, Misses: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := metrics.NewCounters(tt.opts...)
			apply(c, tt.events)
			assert.Equal(t, tt.wantSnap, c.Snapshot())
			assert.Equal(t, tt.wantTotal, c.Total())
			for tier, want := range tt.wantSnap {
				assert.Equal(t, want, c.Tier(tier), "Tier(%q)", tier)
			}
		})
	}
}

// A nil Option is ignored (before: a nil dereference), as affinity.New does.
func TestNewCountersNilOption(t *testing.T) {
	var c *metrics.Counters
	require.NotPanics(t, func() { c = metrics.NewCounters(nil, metrics.WithMaxTiers(3), nil) })
	assert.Equal(t, 3, c.MaxTiers())
}

func TestCountersMaxTiers(t *testing.T) {
	tests := []struct {
		name string
		c    *metrics.Counters
		want int
	}{
		{"zero value", &metrics.Counters{}, 64},
		{"no option", metrics.NewCounters(), 64},
		{"explicit", metrics.NewCounters(metrics.WithMaxTiers(3)), 3},
		{"zero means default", metrics.NewCounters(metrics.WithMaxTiers(0)), 64},
		{"negative means default", metrics.NewCounters(metrics.WithMaxTiers(-5)), 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.c.MaxTiers())
		})
	}
}

func TestCountersDefaultFoldsAt64(t *testing.T) {
	var c metrics.Counters // zero value
	for i := range 100 {
		c.Hit(fmt.Sprintf("tier-%03d", i))
	}
	snap := c.Snapshot()
	assert.Len(t, snap, 65, "64 tiers plus other")
	assert.Equal(t, uint64(36), snap[metrics.OtherTier].Hits)
	assert.Equal(t, uint64(1), snap["tier-063"].Hits)
	assert.Equal(t, metrics.TierCounts{}, c.Tier("tier-064"), "folded tier reads as zero")
	assert.Equal(t, uint64(100), c.Total().Hits)
}

func TestCountersSnapshotIsACopy(t *testing.T) {
	c := metrics.NewCounters()
	c.Hit("gold")
	snap := c.Snapshot()
	snap["gold"] = metrics.TierCounts{Hits: 99}
	snap["injected"] = metrics.TierCounts{Misses: 1}
	delete(snap, "gold")

	c.Hit("gold")
	assert.Equal(t, map[string]metrics.TierCounts{"gold": {Hits: 2}}, c.Snapshot())

	before := c.Snapshot()
	c.Miss("gold")
	assert.Equal(t, metrics.TierCounts{Hits: 2}, before["gold"], "an earlier snapshot does not change")
}

func TestCountersRetainCopyOfTier(t *testing.T) {
	c := metrics.NewCounters()
	buf := []byte("gold")
	// A string built without copying would alias buf; emulate a caller reusing its buffer
	// by recording a fresh string and mutating the source afterwards.
	tier := string(buf)
	c.Hit(tier)
	buf[0] = 'G'
	assert.Equal(t, map[string]metrics.TierCounts{"gold": {Hits: 1}}, c.Snapshot())
}

func TestCountersConcurrent(t *testing.T) {
	const (
		goroutines = 16
		perG       = 2000
	)
	c := metrics.NewCounters(metrics.WithMaxTiers(4))
	tiers := []string{"a", "b", "c", "d", "e", "f"} // e and f fold into other
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				tier := tiers[(g+i)%len(tiers)]
				c.Hit(tier)
				c.Miss(tier)
				c.Broken(tier, metrics.ReasonDown)
				c.Evicted(tier)
				if i%100 == 0 {
					_ = c.Snapshot() // readers race with writers
				}
			}
		}()
	}
	wg.Wait()

	const n = goroutines * perG
	assert.Equal(t, metrics.TierCounts{Hits: n, Misses: n, Evictions: n, Broken: [metrics.NumReasons + 1]uint64{0, n, 0, 0}}, c.Total())
	snap := c.Snapshot()
	require.Len(t, snap, 5)
	// Which 4 tiers won a slot depends on scheduling; whichever did keeps every one of its
	// events, and the other 2 tiers are folded together.
	want := map[string]uint64{}
	for g := range goroutines {
		for i := range perG {
			want[tiers[(g+i)%len(tiers)]]++
		}
	}
	var folded uint64
	for _, tier := range tiers {
		got, named := snap[tier]
		if !named {
			folded += want[tier]
			continue
		}
		assert.Equal(t, want[tier], got.Hits, "tier %q", tier)
		assert.Equal(t, want[tier], got.Broken[metrics.ReasonDown], "tier %q", tier)
	}
	assert.Equal(t, folded, snap[metrics.OtherTier].Hits)
	assert.Equal(t, folded, snap[metrics.OtherTier].Evictions)
}

func TestCountersHitAllocs(t *testing.T) {
	c := metrics.NewCounters(metrics.WithMaxTiers(1))
	c.Hit("gold")
	c.Hit("folded") // creates other
	tests := []struct {
		name string
		fn   func()
	}{
		{"known tier", func() { c.Hit("gold") }},
		{"folded tier", func() { c.Hit("another-folded") }},
		{"broken", func() { c.Broken("gold", metrics.ReasonDown) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, 0.0, testing.AllocsPerRun(1000, tt.fn))
		})
	}
}

func TestHitRate(t *testing.T) {
	tests := []struct {
		tc   metrics.TierCounts
		want float64
	}{
		{metrics.TierCounts{}, 0},
		{metrics.TierCounts{Hits: 5, Misses: 1}, 5.0 / 6.0},
		{metrics.TierCounts{Misses: 72}, 0},
		{metrics.TierCounts{Hits: 3}, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.tc.Hits, "/", tt.tc.Misses), func(t *testing.T) {
			assert.InDelta(t, tt.want, tt.tc.HitRate(), 1e-12)
		})
	}
	assert.Equal(t, uint64(6), metrics.TierCounts{Broken: [metrics.NumReasons + 1]uint64{1, 2, 0, 3}}.BrokenTotal())
}
