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

// TestTableManyTTLClasses: with more distinct TTLs than a shard keeps beside its lock
// (seven classes here), eviction still takes the oldest binding of any class and expiry
// follows each binding's own TTL. MaxBindings 16 gives one shard.
func TestTableManyTTLClasses(t *testing.T) {
	tiers := []string{"t100", "t200", "t300", "t400", "t500", "t600"}
	cfg := affinity.Config{MaxBindings: 16, Tiers: map[string]affinity.TierConfig{}}
	for i, tier := range tiers {
		cfg.Tiers[tier] = affinity.TierConfig{StickyTTLSeconds: affinity.TTLSeconds(int64(100 * (i + 1)))}
	}
	tb, clk, rec := newTable(t, cfg)
	type binding struct {
		tier    string
		ttl     time.Duration
		lastUse time.Time
	}
	live := map[string]binding{}
	bind := func(i int) {
		s, tier := fmt.Sprintf("s%d", i), tiers[(i+5)%len(tiers)] // s0 in t600, the last class
		clk.Advance(time.Second)
		require.NoError(t, tb.Bind(s, tier, "b1"))
		live[s] = binding{tier, tb.TTL(tier), clk.Now()}
	}
	for i := range 16 {
		bind(i)
	}
	bind(16) // at the cap: evicts s0 (the oldest, in class t600)
	delete(live, "s0")
	_, ok := tb.Get("s0", "t600")
	assert.False(t, ok)
	require.Equal(t, []metrics.Event{{Kind: metrics.KindEvicted, Tier: "t600"}}, rec.Events())

	clk.Advance(time.Second)
	_, ok = tb.Touch("s1", live["s1"].tier) // s1 becomes the newest; s2 is now the oldest
	require.True(t, ok)
	live["s1"] = binding{live["s1"].tier, live["s1"].ttl, clk.Now()}
	bind(17)
	delete(live, "s2")
	_, ok = tb.Get("s2", tiers[(2+5)%len(tiers)])
	assert.False(t, ok)
	assert.EqualValues(t, 2, tb.Stats().Evictions)

	clk.Advance(250 * time.Second) // t100 and t200 expire
	expired := 0
	for s, b := range live {
		if clk.Now().Sub(b.lastUse) >= b.ttl {
			expired++
			delete(live, s)
		}
	}
	require.Positive(t, expired)
	require.Equal(t, expired, tb.Sweep())
	require.Equal(t, len(live), tb.Len())
	for s, b := range live {
		_, ok := tb.Get(s, b.tier)
		assert.True(t, ok, s)
	}
}

// TestOnBackendDownManyPerShard: a backend holding hundreds of bindings in every shard
// (more than deleteBackend takes in one batch), mixed with another backend's, in three
// tiers of three TTLs, one tier expired: OnBackendDown counts exactly the valid ones as
// broken, per tier, and the expired ones as expired; the other backend keeps all of its.
func TestOnBackendDownManyPerShard(t *testing.T) {
	f := newFixture(t, affinity.Config{
		StickyTTLSeconds: affinity.TTLSeconds(10),
		Tiers: map[string]affinity.TierConfig{
			"gold": {StickyTTLSeconds: affinity.TTLSeconds(100)},
			"x":    {StickyTTLSeconds: affinity.TTLSeconds(1000)},
		},
	})
	a := []affinity.Backend{affinity.MustBackend("a", "", 1)}
	b := []affinity.Backend{affinity.MustBackend("b", "", 1)}
	tiers := []string{"", "gold", "x"}
	const n = 40_000 // 30,000 on a: about 470 per shard
	onB := func(i int) bool { return i%4 == 3 }
	want := map[string]int{}
	wantExpired, lenB := 0, 0
	for i := range n {
		tier := tiers[i%3]
		cands := a
		if onB(i) {
			cands, lenB = b, lenB+1
		} else if tier == "" {
			wantExpired++
		} else {
			want[tier]++
		}
		f.sel(t, fmt.Sprintf("s%d", i), tier, cands)
	}
	f.clk.Advance(20 * time.Second) // tier "" expires, "gold" and "x" stay valid
	before := f.s.Stats()

	assert.Equal(t, want["gold"]+want["x"], f.s.OnBackendDown("a"))
	after := f.s.Stats()
	assert.Equal(t, uint64(want["gold"]+want["x"]), after.Broken.Down-before.Broken.Down)
	assert.Equal(t, uint64(wantExpired), after.Expired-before.Expired)
	for _, tier := range tiers {
		assert.Equal(t, want[tier], f.rec.CountBroken(tier, metrics.ReasonDown), "tier %q", tier)
	}
	assert.Equal(t, lenB, f.s.Len())
	for i := range n {
		id, ok := f.s.Lookup(fmt.Sprintf("s%d", i), tiers[i%3])
		wantOK := onB(i) && tiers[i%3] != ""
		require.Equal(t, wantOK, ok, "s%d", i)
		if ok {
			require.Equal(t, "b", id)
		}
	}
	assert.Equal(t, 0, f.s.OnBackendDown("a"), "idempotent")
	assert.Equal(t, lenB, f.s.Len())
}
