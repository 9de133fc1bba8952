package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/metrics"
)

func newTable(t *testing.T, cfg affinity.Config) (*affinity.Table, *affinitytest.Clock, *metrics.Recording) {
	t.Helper()
	clk := affinitytest.NewClock(t0)
	rec := &metrics.Recording{}
	tb, err := affinity.NewTable(cfg, affinity.WithClock(clk), affinity.WithRecorder(rec))
	require.NoError(t, err)
	return tb, clk, rec
}

func TestTable(t *testing.T) {
	tb, clk, rec := newTable(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(10), MaxBindings: 1})
	require.NoError(t, tb.Bind("s", "", "b1"))
	id, ok := tb.Get("s", "")
	assert.True(t, ok)
	assert.Equal(t, "b1", id)
	require.NoError(t, tb.Bind("s", "", "b2")) // replace, not an eviction
	id, _ = tb.Get("s", "")
	assert.Equal(t, "b2", id)
	assert.Zero(t, tb.Stats().Evictions)

	clk.Advance(9 * time.Second)
	_, ok = tb.Touch("s", "")
	assert.True(t, ok)
	clk.Advance(9 * time.Second)
	_, ok = tb.Get("s", "")
	assert.True(t, ok, "Touch extended it")
	clk.Advance(time.Second)
	_, ok = tb.Get("s", "")
	assert.False(t, ok, "Get does not extend")

	require.NoError(t, tb.Bind("x", "t", "b1"))
	assert.Equal(t, 1, tb.Len())
	assert.Equal(t, 0, rec.Evictions(""), "at the cap, the expired binding is reclaimed first, not evicted")
	assert.Equal(t, uint64(1), tb.Stats().Expired)

	require.NoError(t, tb.Bind("y", "t", "b1")) // at the cap: evicts x
	assert.Equal(t, 1, rec.Evictions("t"))
	assert.Equal(t, 1, tb.DeleteBackend("b1"))
	assert.Equal(t, 0, tb.DeleteBackend("b1"))
	assert.False(t, tb.Delete("y", "t"))

	assert.ErrorIs(t, tb.Bind("", "", "b"), affinity.ErrEmptySessionID)
	assert.ErrorIs(t, tb.Bind("s", "", ""), affinity.ErrInvalidBackend)
	_, ok = tb.Get("", "")
	assert.False(t, ok)
}

// TestTableModel runs random operations against a Table and a plain map and compares
// them. Several tiers per session share a hash slot, which exercises the index's probing
// and backward-shift deletion.
func TestTableModel(t *testing.T) {
	tb, _, _ := newTable(t, affinity.Config{MaxBindings: 1 << 20})
	type key struct{ session, tier string }
	model := map[key]string{}
	rng := rand.New(rand.NewPCG(7, 8))
	tiers := []string{"", "a", "bb", "gold"}
	for op := range 200_000 {
		k := key{fmt.Sprintf("s%d", rng.IntN(3000)), tiers[rng.IntN(len(tiers))]}
		switch r := rng.IntN(100); {
		case r < 45:
			b := fmt.Sprintf("b%d", rng.IntN(16))
			require.NoError(t, tb.Bind(k.session, k.tier, b))
			model[k] = b
		case r < 75:
			_, want := model[k]
			require.Equal(t, want, tb.Delete(k.session, k.tier), "op %d", op)
			delete(model, k)
		case r < 99:
			got, ok := tb.Get(k.session, k.tier)
			want, wok := model[k]
			require.Equal(t, wok, ok, "op %d %v", op, k)
			require.Equal(t, want, got)
		default:
			b := fmt.Sprintf("b%d", rng.IntN(16))
			n := 0
			for mk, mb := range model {
				if mb == b {
					delete(model, mk)
					n++
				}
			}
			require.Equal(t, n, tb.DeleteBackend(b))
		}
	}
	require.Equal(t, len(model), tb.Len())
	for k, want := range model {
		got, ok := tb.Get(k.session, k.tier)
		require.True(t, ok)
		require.Equal(t, want, got)
	}
}
