package prometheus_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/metrics"
	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
)

var _ metrics.Recorder = (*promaffinity.Recorder)(nil)

var allNames = []string{
	promaffinity.MetricHits, promaffinity.MetricMisses, promaffinity.MetricBroken,
	promaffinity.MetricEvictions, promaffinity.MetricBindings,
	promaffinity.MetricPromptTokens, promaffinity.MetricCachedPromptTokens,
}

const help = `# HELP agentserve_affinity_bindings Stored session-to-backend bindings (expired ones not yet reclaimed included), read at scrape time.
# TYPE agentserve_affinity_bindings gauge
`

func newRecorder(t *testing.T, opts ...promaffinity.Option) (*promaffinity.Recorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec, err := promaffinity.New(reg, opts...)
	require.NoError(t, err)
	return rec, reg
}

func TestExposition(t *testing.T) {
	rec, reg := newRecorder(t)
	bindings := 7
	rec.ObserveBindings(func() int { return bindings })

	rec.Miss("")
	rec.Hit("")
	rec.Hit("")
	rec.Miss("gpu-a100")
	rec.Hit("gpu-a100")
	rec.Broken("gpu-a100", metrics.ReasonDown)
	rec.Broken("gpu-a100", metrics.ReasonDown)
	rec.Broken("", metrics.ReasonNotCandidate)
	rec.Broken("", metrics.Reason(0)) // invalid: dropped
	rec.Broken("", metrics.Reason(9)) // invalid: dropped
	rec.Evicted("gpu-a100")
	rec.Broken("gpu-a100", metrics.ReasonOverloaded)
	rec.Usage("gpu-a100", 1000, 900)
	rec.Usage("gpu-a100", 500, 0)
	rec.Usage("", 100, 400) // cached capped at prompt
	rec.Usage("", -1, -1)   // negatives count as 0

	want := `# HELP agentserve_affinity_hits_total Requests served by the backend of the session's still-valid binding (affinity hits), by tier.
# TYPE agentserve_affinity_hits_total counter
agentserve_affinity_hits_total{tier="default"} 2
agentserve_affinity_hits_total{tier="gpu-a100"} 1
agentserve_affinity_hits_total{tier="other"} 0
# HELP agentserve_affinity_misses_total Requests placed by rendezvous hashing (new session, expired or broken binding, or affinity disabled), by tier.
# TYPE agentserve_affinity_misses_total counter
agentserve_affinity_misses_total{tier="default"} 1
agentserve_affinity_misses_total{tier="gpu-a100"} 1
agentserve_affinity_misses_total{tier="other"} 0
# HELP agentserve_affinity_broken_total Bindings still within their TTL that could not be honoured, by tier and reason (down, unhealthy, not_candidate, overloaded).
# TYPE agentserve_affinity_broken_total counter
agentserve_affinity_broken_total{reason="down",tier="default"} 0
agentserve_affinity_broken_total{reason="down",tier="gpu-a100"} 2
agentserve_affinity_broken_total{reason="down",tier="other"} 0
agentserve_affinity_broken_total{reason="not_candidate",tier="default"} 1
agentserve_affinity_broken_total{reason="not_candidate",tier="gpu-a100"} 0
agentserve_affinity_broken_total{reason="not_candidate",tier="other"} 0
agentserve_affinity_broken_total{reason="overloaded",tier="default"} 0
agentserve_affinity_broken_total{reason="overloaded",tier="gpu-a100"} 1
agentserve_affinity_broken_total{reason="overloaded",tier="other"} 0
agentserve_affinity_broken_total{reason="unhealthy",tier="default"} 0
agentserve_affinity_broken_total{reason="unhealthy",tier="gpu-a100"} 0
agentserve_affinity_broken_total{reason="unhealthy",tier="other"} 0
# HELP agentserve_affinity_evictions_total Bindings evicted at the capacity limit (least recently used), by tier.
# TYPE agentserve_affinity_evictions_total counter
agentserve_affinity_evictions_total{tier="default"} 0
agentserve_affinity_evictions_total{tier="gpu-a100"} 1
agentserve_affinity_evictions_total{tier="other"} 0
# HELP agentserve_affinity_prompt_tokens_total Prompt tokens of affinity hits as reported by the backend (usage.prompt_tokens; hits that reported cached tokens), by tier.
# TYPE agentserve_affinity_prompt_tokens_total counter
agentserve_affinity_prompt_tokens_total{tier="default"} 100
agentserve_affinity_prompt_tokens_total{tier="gpu-a100"} 1500
agentserve_affinity_prompt_tokens_total{tier="other"} 0
# HELP agentserve_affinity_cached_prompt_tokens_total Prompt tokens of affinity hits served from the backend's prefix cache (usage.prompt_tokens_details.cached_tokens), by tier.
# TYPE agentserve_affinity_cached_prompt_tokens_total counter
agentserve_affinity_cached_prompt_tokens_total{tier="default"} 100
agentserve_affinity_cached_prompt_tokens_total{tier="gpu-a100"} 900
agentserve_affinity_cached_prompt_tokens_total{tier="other"} 0
` + help + `agentserve_affinity_bindings 7
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), allNames...))

	// The gauge is read at scrape time.
	bindings = 42
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(help+"agentserve_affinity_bindings 42\n"), promaffinity.MetricBindings))
	rec.ObserveBindings(nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(help+"agentserve_affinity_bindings 0\n"), promaffinity.MetricBindings))
}

func TestCollectAndCompareFreshRecorder(t *testing.T) {
	rec, reg := newRecorder(t)
	_ = rec
	// Before any event: only the "other" children exist, bindings reads 0.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(help+"agentserve_affinity_bindings 0\n"), promaffinity.MetricBindings))
	assert.Equal(t, 1+1+4+1+2+1+1+5, testutil.CollectAndCount(reg), "other x (hits, misses, 4 broken, evictions, 2 usage, parent_placed) + bindings + 5 store error ops")
}

func TestLint(t *testing.T) {
	rec, reg := newRecorder(t, promaffinity.WithTiers("a", "b"))
	rec.ObserveBindings(func() int { return 1 })
	for _, tier := range []string{"", "a", "b", "c"} {
		rec.Hit(tier)
		rec.Miss(tier)
		rec.Evicted(tier)
		rec.ParentPlaced(tier)
		for r := metrics.ReasonDown; r <= metrics.ReasonOverloaded; r++ {
			rec.Broken(tier, r)
		}
		rec.Usage(tier, 10, 5)
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func hitsByTier(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != promaffinity.MetricHits {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == promaffinity.LabelTier {
					out[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func TestTierFolding(t *testing.T) {
	long := strings.Repeat("t", promaffinity.MaxTierLabelBytes+1)
	tests := []struct {
		name   string
		opts   []promaffinity.Option
		events []string
		want   map[string]float64
	}{
		{
			name:   "allow-list",
			opts:   []promaffinity.Option{promaffinity.WithTiers("a", "b")},
			events: []string{"a", "a", "x", "y", "", "b", "", "other"},
			want:   map[string]float64{"a": 2, "b": 1, "default": 2, "other": 3},
		},
		{
			name:   "empty allow-list keeps only default and other",
			opts:   []promaffinity.Option{promaffinity.WithTiers()},
			events: []string{"a", "", "b"},
			want:   map[string]float64{"default": 1, "other": 2},
		},
		{
			name:   "allow-listed empty tier",
			opts:   []promaffinity.Option{promaffinity.WithTiers("", "a")},
			events: []string{"", "a", "z"},
			want:   map[string]float64{"default": 1, "a": 1, "other": 1},
		},
		{
			name:   "first n distinct tiers",
			opts:   []promaffinity.Option{promaffinity.WithMaxTiers(2)},
			events: []string{"a", "b", "c", "a", "d", "b"},
			want:   map[string]float64{"a": 2, "b": 2, "other": 2},
		},
		{
			name:   "default counts as one of n",
			opts:   []promaffinity.Option{promaffinity.WithMaxTiers(2)},
			events: []string{"", "a", "b", ""},
			want:   map[string]float64{"default": 2, "a": 1, "other": 1},
		},
		{
			name:   "default is kept even when full",
			opts:   []promaffinity.Option{promaffinity.WithMaxTiers(1)},
			events: []string{"a", "b", ""},
			want:   map[string]float64{"a": 1, "default": 1, "other": 1},
		},
		{
			name:   "invalid UTF-8 and overlong tiers fold",
			events: []string{"\xff\xfe", long, "ok"},
			want:   map[string]float64{"ok": 1, "other": 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, reg := newRecorder(t, tc.opts...)
			for _, e := range tc.events {
				rec.Hit(e)
			}
			assert.Equal(t, tc.want, hitsByTier(t, reg))
		})
	}
}

func TestDefaultMaxTiers(t *testing.T) {
	rec, reg := newRecorder(t)
	for i := range 100 {
		rec.Hit(fmt.Sprintf("tier-%02d", i))
	}
	got := hitsByTier(t, reg)
	assert.Len(t, got, promaffinity.DefaultMaxTiers+1)
	assert.Equal(t, float64(100-promaffinity.DefaultMaxTiers), got["other"])
	assert.Equal(t, float64(1), got["tier-31"])
	assert.Equal(t, "tier-31", rec.Label("tier-31"))
	assert.Equal(t, "other", rec.Label("tier-32"))
	assert.Equal(t, "default", rec.Label(""))
}

func TestLabel(t *testing.T) {
	rec, _ := newRecorder(t, promaffinity.WithTiers("a"))
	for tier, want := range map[string]string{"": "default", "a": "a", "b": "other", "other": "other", "\xff": "other"} {
		assert.Equal(t, want, rec.Label(tier), "Label(%q)", tier)
	}
	rec2, _ := newRecorder(t, promaffinity.WithMaxTiers(1))
	assert.Equal(t, "x", rec2.Label("x"), "not yet full: would be kept")
	rec2.Hit("y")
	assert.Equal(t, "other", rec2.Label("x"))
	assert.Equal(t, "y", rec2.Label("y"))
}

func TestNewErrors(t *testing.T) {
	t.Run("nil registerer", func(t *testing.T) {
		_, err := promaffinity.New(nil)
		assert.ErrorIs(t, err, promaffinity.ErrNilRegisterer)
	})
	t.Run("bad options", func(t *testing.T) {
		for _, o := range []promaffinity.Option{
			promaffinity.WithMaxTiers(0), promaffinity.WithMaxTiers(-3),
			promaffinity.WithTiers("ok", "\xff"), promaffinity.WithTiers(strings.Repeat("x", 129)),
		} {
			_, err := promaffinity.New(prometheus.NewRegistry(), o)
			assert.ErrorIs(t, err, promaffinity.ErrInvalidOption)
		}
	})
	t.Run("already registered", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		_, err := promaffinity.New(reg)
		require.NoError(t, err)
		_, err = promaffinity.New(reg)
		var are prometheus.AlreadyRegisteredError
		require.True(t, errors.As(err, &are), "got %v", err)
		assert.Contains(t, err.Error(), promaffinity.MetricHits)
	})
	t.Run("conflicting help is an error, not a panic", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: promaffinity.MetricHits, Help: "someone else's"}))
		_, err := promaffinity.New(reg)
		require.ErrorContains(t, err, "registering "+promaffinity.MetricHits)
	})
	t.Run("partial registration is rolled back", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		// Registered last by New: the four counters are registered, then rolled back.
		clash := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: promaffinity.MetricBindings,
			Help: "Stored session-to-backend bindings (expired ones not yet reclaimed included), read at scrape time."}, func() float64 { return 3 })
		reg.MustRegister(clash)
		_, err := promaffinity.New(reg)
		var are prometheus.AlreadyRegisteredError
		require.ErrorAs(t, err, &are)
		assert.Equal(t, 1, testutil.CollectAndCount(reg), "only the pre-existing gauge is left")
		// The names are free again: after removing the clash, New succeeds.
		require.True(t, reg.Unregister(clash))
		_, err = promaffinity.New(reg)
		require.NoError(t, err)
	})
}

func TestConcurrentUse(t *testing.T) {
	rec, reg := newRecorder(t, promaffinity.WithMaxTiers(8))
	const workers, perWorker = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				tier := fmt.Sprintf("t%d", (w+i)%16)
				rec.Hit(tier)
				rec.Miss(tier)
				rec.Broken(tier, metrics.Reason(1+i%4))
				rec.Evicted(tier)
				if i%100 == 0 {
					_, _ = reg.Gather()
					rec.ObserveBindings(func() int { return i })
				}
			}
		})
	}
	wg.Wait()
	got := hitsByTier(t, reg)
	assert.Len(t, got, 8+1, "8 kept tiers + other")
	var sum float64
	for _, v := range got {
		sum += v
	}
	assert.Equal(t, float64(workers*perWorker), sum)
	assert.Equal(t, float64(workers*perWorker), sumOf(t, reg, promaffinity.MetricBroken))
	assert.Equal(t, float64(workers*perWorker), sumOf(t, reg, promaffinity.MetricEvictions))
}

// sumOf adds up every series of one counter.
func sumOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

func TestKnownTierDoesNotAllocate(t *testing.T) {
	rec, _ := newRecorder(t, promaffinity.WithMaxTiers(1))
	rec.Hit("known")
	tier := strings.Clone("known")
	for name, fn := range map[string]func(){
		"Hit":           func() { rec.Hit(tier) },
		"Miss":          func() { rec.Miss(tier) },
		"Broken":        func() { rec.Broken(tier, metrics.ReasonUnhealthy) },
		"Evicted":       func() { rec.Evicted(tier) },
		"ParentPlaced":  func() { rec.ParentPlaced(tier) },
		"folded tier":   func() { rec.Hit("unknown-tier") },
		"default label": func() { rec.Hit("") },
	} {
		fn()
		assert.Zero(t, testing.AllocsPerRun(100, fn), name)
	}
}

func TestParentPlaced(t *testing.T) {
	rec, reg := newRecorder(t, promaffinity.WithTiers("gold"))
	rec.ParentPlaced("gold")
	rec.ParentPlaced("gold")
	rec.ParentPlaced("lead") // folded
	want := `# HELP agentserve_affinity_parent_placed_total First turns of a subagent session placed on its parent session's backend (also counted as misses), by tier.
# TYPE agentserve_affinity_parent_placed_total counter
agentserve_affinity_parent_placed_total{tier="gold"} 2
agentserve_affinity_parent_placed_total{tier="other"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), promaffinity.MetricParentPlaced))
}
