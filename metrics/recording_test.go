package metrics_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/metrics"
)

func TestRecording(t *testing.T) {
	var r metrics.Recording // zero value
	assert.Nil(t, r.Events())
	script := []metrics.Event{
		miss("gold"), hit("gold"), broken("gold", metrics.ReasonDown), miss("gold"),
		evict("free"), hit("gold"), broken("free", metrics.ReasonNotCandidate), hit(""),
	}
	apply(&r, script)

	assert.Equal(t, script, r.Events())
	assert.Equal(t, 8, r.Len())
	assert.Equal(t, 2, r.Hits("gold"))
	assert.Equal(t, 1, r.Hits(""))
	assert.Equal(t, 2, r.Misses("gold"))
	assert.Equal(t, 0, r.Misses("free"))
	assert.Equal(t, 1, r.Evictions("free"))
	assert.Equal(t, 1, r.Count(metrics.KindBroken, "gold"))
	assert.Equal(t, 1, r.CountBroken("gold", metrics.ReasonDown))
	assert.Equal(t, 0, r.CountBroken("gold", metrics.ReasonNotCandidate))
	assert.Equal(t, 1, r.CountBroken("free", metrics.ReasonNotCandidate))

	ev := r.Events()
	ev[0] = hit("mutated")
	assert.Equal(t, miss("gold"), r.Events()[0], "Events returns a copy")

	r.Reset()
	assert.Nil(t, r.Events())
	assert.Equal(t, 0, r.Len())
	r.Hit("after")
	assert.Equal(t, []metrics.Event{hit("after")}, r.Events())
}

func TestRecordingConcurrentOrderPerGoroutine(t *testing.T) {
	const goroutines, perG = 8, 500
	var r metrics.Recording
	tiers := make([]string, goroutines)
	for g := range tiers {
		tiers[g] = fmt.Sprintf("g%d", g)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				if i%2 == 0 {
					r.Miss(tiers[g])
				} else {
					r.Hit(tiers[g])
				}
			}
		}()
	}
	wg.Wait()
	ev := r.Events()
	require.Len(t, ev, goroutines*perG)
	// Each goroutine's own events keep their order: miss, hit, miss, hit, ...
	next := map[string]int{}
	for _, e := range ev {
		i := next[e.Tier]
		wantKind := metrics.KindMiss
		if i%2 == 1 {
			wantKind = metrics.KindHit
		}
		require.Equal(t, wantKind, e.Kind, "event %d of %s", i, e.Tier)
		next[e.Tier] = i + 1
	}
	for _, tier := range tiers {
		assert.Equal(t, perG/2, r.Hits(tier))
		assert.Equal(t, perG/2, r.Misses(tier))
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name                  string
		prompt, cached        int64
		wantPrompt, wantCache uint64
	}{
		{"plain", 1000, 800, 1000, 800},
		{"cold", 1000, 0, 1000, 0},
		{"cached above prompt is capped", 100, 250, 100, 100},
		{"negatives count as 0", -5, -1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := metrics.NewCounters()
			var r metrics.Recording
			for _, u := range []metrics.UsageRecorder{c, &r, metrics.Noop{}} {
				u.Usage("gold", tt.prompt, tt.cached)
			}
			got := c.Tier("gold")
			assert.Equal(t, tt.wantPrompt, got.PromptTokens)
			assert.Equal(t, tt.wantCache, got.CachedPromptTokens)
			assert.Equal(t, got, c.Total())
			ev := r.Events()
			require.Len(t, ev, 1)
			assert.Equal(t, metrics.Event{Kind: metrics.KindUsage, Tier: "gold", PromptTokens: tt.prompt, CachedPromptTokens: tt.cached}, ev[0])
		})
	}
	c := metrics.NewCounters()
	assert.Zero(t, c.Tier("x").Reuse(), "no usage: reuse 0")
	c.Usage("x", 400, 300)
	assert.InDelta(t, 0.75, c.Tier("x").Reuse(), 1e-12)
	assert.Equal(t, `usage tier="x" prompt=400 cached=300`,
		metrics.Event{Kind: metrics.KindUsage, Tier: "x", PromptTokens: 400, CachedPromptTokens: 300}.String())
}
