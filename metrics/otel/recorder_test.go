package otel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
	otelaffinity "github.com/agentserve/sessionaffinity/metrics/otel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	_ metrics.Recorder       = (*otelaffinity.Recorder)(nil)
	_ metrics.ParentRecorder = (*otelaffinity.Recorder)(nil)
	_ metrics.UsageRecorder  = (*otelaffinity.Recorder)(nil)
	_ metrics.StoreRecorder  = (*otelaffinity.Recorder)(nil)
)

func newRecorder(t *testing.T, opts ...otelaffinity.Option) (*otelaffinity.Recorder, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := otelaffinity.New(mp, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rec.Close() })
	return rec, reader
}

// collect renders every data point as `name{k=v,...} value`, sorted, skipping zeros.
func collect(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var out []string
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, otelaffinity.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				assert.True(t, d.IsMonotonic, "%s must be a monotonic counter", m.Name)
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			default:
				t.Fatalf("%s: unexpected data type %T", m.Name, m.Data)
			}
			for _, p := range points {
				var kv []string
				for _, a := range p.Attributes.ToSlice() {
					kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.AsString()))
				}
				out = append(out, fmt.Sprintf("%s{%s} %d", m.Name, strings.Join(kv, ","), p.Value))
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestInstruments(t *testing.T) {
	rec, reader := newRecorder(t)
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
	rec.ParentPlaced("gpu-a100")
	rec.Broken("", metrics.ReasonOverloaded)
	rec.Usage("gpu-a100", 1000, 900)
	rec.Usage("gpu-a100", 500, 800) // cached capped at prompt
	rec.Usage("", -5, -1)           // negatives count as 0
	rec.StoreError(metrics.StoreOpClaim)
	rec.StoreError(metrics.StoreOpClaim)
	rec.StoreError(metrics.StoreOpRefresh)
	rec.StoreError("made-up") // unbounded values fold to "other"

	want := []string{
		"agentserve.affinity.bindings{} 7",
		"agentserve.affinity.broken{reason=down,tier=gpu-a100} 2",
		"agentserve.affinity.broken{reason=not_candidate,tier=default} 1",
		"agentserve.affinity.broken{reason=overloaded,tier=default} 1",
		"agentserve.affinity.cached_prompt_tokens{tier=default} 0",
		"agentserve.affinity.cached_prompt_tokens{tier=gpu-a100} 1400",
		"agentserve.affinity.evictions{tier=gpu-a100} 1",
		"agentserve.affinity.hits{tier=default} 2",
		"agentserve.affinity.hits{tier=gpu-a100} 1",
		"agentserve.affinity.misses{tier=default} 1",
		"agentserve.affinity.misses{tier=gpu-a100} 1",
		"agentserve.affinity.parent_placed{tier=gpu-a100} 1",
		"agentserve.affinity.prompt_tokens{tier=default} 0",
		"agentserve.affinity.prompt_tokens{tier=gpu-a100} 1500",
		"agentserve.affinity.store_errors{op=claim} 2",
		"agentserve.affinity.store_errors{op=other} 1",
		"agentserve.affinity.store_errors{op=refresh} 1",
	}
	assert.Equal(t, want, collect(t, reader))

	bindings = 3
	assert.Contains(t, collect(t, reader), "agentserve.affinity.bindings{} 3", "the gauge is read at collection time")
	rec.ObserveBindings(nil)
	assert.Contains(t, collect(t, reader), "agentserve.affinity.bindings{} 0")
}

func TestUnitsAndDescriptions(t *testing.T) {
	rec, reader := newRecorder(t)
	rec.Hit("")
	rec.Miss("")
	rec.Broken("", metrics.ReasonDown)
	rec.Evicted("")
	rec.ParentPlaced("")
	rec.Usage("", 10, 5)
	rec.StoreError(metrics.StoreOpWatch)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	units := map[string]string{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		units[m.Name] = m.Unit
		assert.NotEmpty(t, m.Description, m.Name)
	}
	assert.Equal(t, map[string]string{
		otelaffinity.MetricHits: "{request}", otelaffinity.MetricMisses: "{request}",
		otelaffinity.MetricBroken: "{binding}", otelaffinity.MetricEvictions: "{binding}",
		otelaffinity.MetricParentPlaced: "{request}", otelaffinity.MetricBindings: "{binding}",
		otelaffinity.MetricPromptTokens: "{token}", otelaffinity.MetricCachedPromptTokens: "{token}",
		otelaffinity.MetricStoreErrors: "{call}",
	}, units)
}

func TestTierFolding(t *testing.T) {
	tests := []struct {
		name   string
		opts   []otelaffinity.Option
		events []string // tiers, each gets one Miss
		want   []string
	}{
		{
			name: "allow-list",
			opts: []otelaffinity.Option{otelaffinity.WithTiers("interactive")},
			// A tier literally named "default" is not the empty tier: not allow-listed, it folds.
			events: []string{"interactive", "batch", "", "default", "x"},
			want: []string{
				"agentserve.affinity.misses{tier=default} 1",
				"agentserve.affinity.misses{tier=interactive} 1",
				"agentserve.affinity.misses{tier=other} 3",
			},
		},
		{
			name:   "max tiers",
			opts:   []otelaffinity.Option{otelaffinity.WithMaxTiers(2)},
			events: []string{"a", "b", "c", "a", "", "d"},
			want: []string{
				"agentserve.affinity.misses{tier=a} 2",
				"agentserve.affinity.misses{tier=b} 1",
				"agentserve.affinity.misses{tier=default} 1",
				"agentserve.affinity.misses{tier=other} 2",
			},
		},
		{
			name:   "invalid utf-8 and overlong tiers fold",
			events: []string{"\xff", strings.Repeat("t", otelaffinity.MaxTierAttrBytes+1), strings.Repeat("t", otelaffinity.MaxTierAttrBytes)},
			want: []string{
				"agentserve.affinity.misses{tier=other} 2",
				"agentserve.affinity.misses{tier=" + strings.Repeat("t", otelaffinity.MaxTierAttrBytes) + "} 1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, reader := newRecorder(t, tt.opts...)
			for _, tier := range tt.events {
				rec.Miss(tier)
			}
			var got []string
			for _, s := range collect(t, reader) {
				if strings.HasPrefix(s, otelaffinity.MetricMisses) {
					got = append(got, s)
				}
			}
			sort.Strings(tt.want)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestTierLabel(t *testing.T) {
	rec, _ := newRecorder(t, otelaffinity.WithMaxTiers(1))
	assert.Equal(t, "default", rec.Tier(""))
	assert.Equal(t, "a", rec.Tier("a"), "not yet full")
	rec.Hit("a")
	assert.Equal(t, "a", rec.Tier("a"))
	assert.Equal(t, "other", rec.Tier("b"))
}

func TestNewErrors(t *testing.T) {
	_, err := otelaffinity.New(nil)
	assert.ErrorIs(t, err, otelaffinity.ErrNilMeterProvider)
	for _, opt := range []otelaffinity.Option{otelaffinity.WithMaxTiers(0), otelaffinity.WithTiers("\xff")} {
		_, err := otelaffinity.New(noop.NewMeterProvider(), opt)
		assert.ErrorIs(t, err, otelaffinity.ErrInvalidOption)
	}
	rec, err := otelaffinity.New(noop.NewMeterProvider(), nil)
	require.NoError(t, err)
	rec.Hit("") // a no-op provider works
	require.NoError(t, rec.Close())
	require.NoError(t, rec.Close(), "idempotent")
}

func TestCloseStopsGauge(t *testing.T) {
	rec, reader := newRecorder(t)
	calls := 0
	rec.ObserveBindings(func() int { calls++; return 1 })
	collect(t, reader)
	require.Equal(t, 1, calls)
	require.NoError(t, rec.Close())
	collect(t, reader)
	assert.Equal(t, 1, calls, "after Close the callback is not called")
}

// The Scheduler drives the adapter end to end: one session, three turns.
func TestWithScheduler(t *testing.T) {
	rec, reader := newRecorder(t)
	sched, err := affinity.New(affinity.Config{}, affinity.WithRecorder(rec))
	require.NoError(t, err)
	rec.ObserveBindings(sched.Len)
	backends := []affinity.Backend{affinity.MustBackend("a", "", 1), affinity.MustBackend("b", "", 1)}
	for range 3 {
		_, _, err := sched.SelectBackend("s1", "gold", backends)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{
		"agentserve.affinity.bindings{} 1",
		"agentserve.affinity.hits{tier=gold} 2",
		"agentserve.affinity.misses{tier=gold} 1",
	}, collect(t, reader))
}

func TestConcurrent(t *testing.T) {
	rec, reader := newRecorder(t, otelaffinity.WithMaxTiers(4))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				rec.Hit(fmt.Sprintf("t%d", (g+i)%8))
			}
		}()
	}
	wg.Wait()
	var total int64
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	tiers := map[string]bool{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != otelaffinity.MetricHits {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			total += p.Value
			v, _ := p.Attributes.Value(attribute.Key(otelaffinity.AttrTier))
			tiers[v.AsString()] = true
		}
	}
	assert.Equal(t, int64(8000), total)
	assert.Len(t, tiers, 5, "4 kept tiers + other: %v", tiers)
}

func TestInstrumentError(t *testing.T) {
	_, err := otelaffinity.New(failingProvider{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, errBoom), "got %v", err)
}
