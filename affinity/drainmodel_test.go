package affinity_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/internal/benchmin"
)

// drainCfg is load awareness with the drain model: factor, weight, an initial rate of
// rate tokens/s and the retention guard factor.
func drainCfg(factor, weight, rate, guard float64) affinity.Config {
	return affinity.Config{Load: affinity.LoadConfig{BalanceFactor: factor, SpillCostWeight: affinity.SpillWeight(weight),
		DrainTokensPerSecond: rate, RetentionGuardFactor: guard}}
}

func TestDrainConfig(t *testing.T) {
	cases := []configCase{
		{"drain keys", `{"load": {"balance_factor": 1.25, "drain_tokens_per_second": 16000, "drain_ewma_weight": 0.1, "retention_guard_factor": 2.5}}`, ""},
		{"drain rate negative", `{"load": {"balance_factor": 1.25, "drain_tokens_per_second": -1}}`, "load.drain_tokens_per_second: -1"},
		{"ewma above 1", `{"load": {"balance_factor": 1.25, "drain_ewma_weight": 1.5}}`, "load.drain_ewma_weight: 1.5"},
		{"ewma negative", `{"load": {"balance_factor": 1.25, "drain_ewma_weight": -0.1}}`, "load.drain_ewma_weight"},
		{"guard below 1", `{"load": {"balance_factor": 1.25, "drain_tokens_per_second": 1000, "retention_guard_factor": 0.5}}`, "load.retention_guard_factor: 0.5"},
		{"guard without drain", `{"load": {"balance_factor": 1.25, "retention_guard_factor": 2}}`, "needs load.drain_tokens_per_second"},
		{"drain wrong type", `{"load": {"drain_tokens_per_second": "fast"}}`, "load.drain_tokens_per_second"},
	}
	runConfigCases(t, cases)
	cfg, err := func() (affinity.Config, error) {
		var c affinity.Config
		err := c.UnmarshalYAML(func(v any) error {
			return json.Unmarshal([]byte(`{"load": {"balance_factor": 1.25, "drain_tokens_per_second": 16000, "retention_guard_factor": 2.5}}`), v)
		})
		return c, err
	}()
	require.NoError(t, err, "the yaml names are known keys")
	assert.Equal(t, 16000.0, cfg.Load.DrainTokensPerSecond)
	assert.Equal(t, 2.5, cfg.Load.RetentionGuardFactor)
}

// TestDrainView: with the drain model a lease's charge drains with the clock at the
// backend's rate, while the lease-sum view keeps it until Done; Done re-anchors the view
// on the leases still open and teaches the rate.
func TestDrainView(t *testing.T) {
	b := backendsN(1)
	id := b[0].ID()

	plain, clkP := newSched(t, loadCfg(1.25, 5))
	lp, err := acquire(plain, "a", "", b, 1000)
	require.NoError(t, err)
	clkP.Advance(10 * time.Second)
	assert.Equal(t, int64(1000), plain.LoadView(id), "lease-sum view: no drain")
	lp.Done(affinity.DoneInfo{})
	assert.Zero(t, plain.Drain(id), "drain model off")

	s, clk := newSched(t, drainCfg(1.25, 5, 1000, 0))
	assert.Equal(t, 1000.0, s.Drain(id).TokensPerSecond, "configured rate before any Done")
	l1, err := acquire(s, "a", "", b, 1000)
	require.NoError(t, err)
	l2, err := acquire(s, "b", "", b, 500)
	require.NoError(t, err)
	assert.Equal(t, int64(1500), s.LoadView(id))
	clk.Advance(500 * time.Millisecond)
	assert.Equal(t, int64(1000), s.LoadView(id), "500 ms at 1000 tokens/s")
	clk.Advance(2 * time.Second)
	assert.Zero(t, s.LoadView(id), "drained, although both leases are open")
	assert.Equal(t, int64(2), s.Load(id).Requests)

	// The first request ends at 2.5 s: its service time is 2.5 s for 1000 uncached tokens
	// (400 tokens/s), and the horizon is re-anchored on the open lease (500 tokens).
	l1.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
	assert.InDelta(t, 400, s.Drain(id).TokensPerSecond, 1e-6)
	assert.Equal(t, int64(500), s.LoadView(id), "the open lease counts again")
	clk.Advance(time.Second)
	assert.Equal(t, int64(100), s.LoadView(id), "and drains at the learned rate")
	l2.Done(affinity.DoneInfo{})
	assert.Zero(t, s.LoadView(id))
	assert.Equal(t, affinity.LoadSnapshot{}, s.Load(id))
}

// TestDrainLearnsServiceModel: a backend that serves requests one at a time in
// 50 ms + tokens / 10,000 s (with a queue: each request starts when the previous ends)
// is learned as 10,000 tokens/s and 50 ms per request.
func TestDrainLearnsServiceModel(t *testing.T) {
	s, clk := newSched(t, drainCfg(1.25, 5, 1000, 0))
	b := backendsN(1)
	service := func(tokens int64) time.Duration {
		return 50*time.Millisecond + time.Duration(tokens)*100*time.Microsecond
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		// Two requests arrive together; the second waits for the first.
		t1, t2 := int64(500+rng.IntN(9000)), int64(500+rng.IntN(9000))
		l1, err := acquire(s, fmt.Sprintf("x%d", i), "", b, t1)
		require.NoError(t, err)
		l2, err := acquire(s, fmt.Sprintf("y%d", i), "", b, t2)
		require.NoError(t, err)
		clk.Advance(service(t1))
		l1.Done(affinity.DoneInfo{PromptTokens: t1 + 100, CachedPromptTokens: 100, CacheReported: true})
		clk.Advance(service(t2))
		l2.Done(affinity.DoneInfo{PromptTokens: t2, CacheReported: true})
		clk.Advance(time.Second) // idle: not service time
	}
	m := s.Drain(b[0].ID())
	assert.InEpsilon(t, 10000, m.TokensPerSecond, 0.01, "%+v", m)
	assert.InDelta(t, float64(50*time.Millisecond), float64(m.PerRequest), float64(time.Millisecond), "%+v", m)

	// The learned model prices a new lease: 50 ms + 2,000 tokens = 250 ms of work, shown
	// as 2,500 tokens (time at the marginal rate) but never more than the lease's charge
	// plus its per-request time.
	l, err := acquire(s, "z", "", b, 2000)
	require.NoError(t, err)
	assert.InDelta(t, 2500, float64(s.LoadView(b[0].ID())), 30)
	clk.Advance(125 * time.Millisecond)
	assert.InDelta(t, 1250, float64(s.LoadView(b[0].ID())), 30)
	l.Done(affinity.DoneInfo{})
}

// TestDrainCacheRetention: a hit is charged its cost minus its binding's previous prompt
// while the binding was idle for less than the backend's learned cache retention, and its
// whole cost after; the retention is learned from the cached tokens hits report.
func TestDrainCacheRetention(t *testing.T) {
	s, clk := newSched(t, drainCfg(1.25, 5, 1000, 0))
	b := backendsN(1)
	id := b[0].ID()
	turn := func(session string, cost, cached int64) int64 {
		t.Helper()
		l, err := acquire(s, session, "", b, cost)
		require.NoError(t, err)
		charged := s.Load(id).Cost
		l.Done(affinity.DoneInfo{PromptTokens: cost, CachedPromptTokens: cached, CacheReported: true})
		return charged
	}
	// Prompt sizes are multiples of 64 tokens, the granularity a binding keeps them in.
	assert.Equal(t, int64(1024), turn("a", 1024, 0), "first turn: a miss, charged in full")
	clk.Advance(10 * time.Second)
	assert.Equal(t, int64(512), turn("a", 1536, 0), "hit: 1536 - the previous 1024, no retention known yet")
	assert.Equal(t, 10*time.Second, s.Drain(id).CacheRetention, "the first eviction sets it")

	assert.Equal(t, int64(832), turn("b", 832, 0))
	clk.Advance(20 * time.Second)
	assert.Equal(t, int64(1216), turn("b", 1216, 0), "idle 20 s >= retention: charged in full")
	assert.Equal(t, 10*time.Second, s.Drain(id).CacheRetention, "an eviction above the threshold changes nothing")

	assert.Equal(t, int64(2048), turn("c", 2048, 0))
	clk.Advance(5 * time.Second)
	assert.Equal(t, int64(1024), turn("c", 3072, 2048), "idle 5 s: the prefix is expected cached")
	clk.Advance(15 * time.Second)
	assert.Equal(t, int64(4096), turn("c", 4096, 3072), "idle 15 s: expected evicted, yet it survived")
	assert.Equal(t, 10*time.Second+250*time.Millisecond, s.Drain(id).CacheRetention,
		"a survival above the threshold raises it by 0.05 of the distance")
}

// TestDrainRetentionGuard: with retention_guard_factor f, a binding idle for at least f x
// its backend's retention spills from an overloaded backend even when the spill guard
// would keep a warm prefix; below that it stays.
func TestDrainRetentionGuard(t *testing.T) {
	bs := backendsN(4)
	for _, tc := range []struct {
		idle  time.Duration
		spill bool
	}{{15 * time.Second, false}, {25 * time.Second, true}} {
		t.Run(tc.idle.String(), func(t *testing.T) {
			// A weight no queue can beat: only a reprefill of 0 lets a binding move.
			s, clk := newSched(t, drainCfg(1.0, 1e9, 1000, 2))
			first, err := acquire(s, "s", "", bs, 4000)
			require.NoError(t, err)
			w := first.Backend
			first.Done(affinity.DoneInfo{PromptTokens: 4000, CacheReported: true})
			// Teach w a retention of 10 s with another session.
			l, err := acquire(s, "r", "", []affinity.Backend{w}, 1000)
			require.NoError(t, err)
			l.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
			clk.Advance(10 * time.Second)
			l, err = acquire(s, "r", "", []affinity.Backend{w}, 1200)
			require.NoError(t, err)
			l.Done(affinity.DoneInfo{PromptTokens: 1200, CacheReported: true})
			require.Equal(t, 10*time.Second, s.Drain(w.ID()).CacheRetention)

			clk.Advance(tc.idle - 10*time.Second)
			busy, err := acquire(s, "bg", "", []affinity.Backend{w}, 500000) // w overloaded
			require.NoError(t, err)
			l, err = acquire(s, "s", "", bs, 5000)
			require.NoError(t, err)
			if tc.spill {
				assert.Equal(t, affinity.OutcomeSpill, l.Outcome)
				assert.NotEqual(t, w.ID(), l.Backend.ID())
			} else {
				assert.Equal(t, affinity.OutcomeHit, l.Outcome)
			}
			l.Done(affinity.DoneInfo{})
			busy.Done(affinity.DoneInfo{})
		})
	}
}

// TestDrainRace: concurrent Acquire and Done (also twice, from other goroutines) with the
// drain model: every lease is released and nothing is left in any backend's view.
func TestDrainRace(t *testing.T) {
	s, clk := newSched(t, drainCfg(1.1, 2, 5000, 2))
	bs := backendsN(6)
	leases := make(chan *affinity.Lease, 64)
	var wg, rel sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := range 2000 {
				if i%50 == 0 {
					clk.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
				}
				l, err := acquire(s, fmt.Sprintf("s%d", rng.IntN(300)), "", bs, int64(rng.IntN(6000)))
				if !assert.NoError(t, err) {
					return
				}
				if i%2 == 0 {
					leases <- l
				} else {
					l.Done(affinity.DoneInfo{PromptTokens: 4000, CachedPromptTokens: int64(rng.IntN(4000)), CacheReported: true})
				}
			}
		}()
	}
	for range 2 {
		rel.Add(1)
		go func() {
			defer rel.Done()
			for l := range leases {
				l.Done(affinity.DoneInfo{PromptTokens: 2000, CacheReported: true})
				l.Done(affinity.DoneInfo{}) // twice
			}
		}()
	}
	wg.Wait()
	close(leases)
	rel.Wait()
	for _, b := range bs {
		assert.Equal(t, affinity.LoadSnapshot{}, s.Load(b.ID()), b.ID())
		assert.Zero(t, s.LoadView(b.ID()), b.ID())
		assert.Positive(t, s.Drain(b.ID()).TokensPerSecond, b.ID())
	}
}

// TestDrainHitZeroAllocs: Acquire+Done on a hit with the drain model allocates nothing.
func TestDrainHitZeroAllocs(t *testing.T) {
	s, clk := newSched(t, drainCfg(1.25, 5, 16000, 2.5))
	bs := backendsN(8)
	var l affinity.Lease // the caller's, reused
	require.NoError(t, s.Acquire("s", "", bs, 1000, &l))
	l.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
	allocs := testing.AllocsPerRun(1000, func() {
		clk.Advance(time.Millisecond)
		err := s.Acquire("s", "", bs, 1000, &l)
		if err != nil || l.Outcome != affinity.OutcomeHit {
			t.Fatal("not a hit", l.Outcome, err)
		}
		l.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 900, CacheReported: true})
	})
	assert.Zero(t, allocs)
}

// BenchmarkLeaseHitDrain is BenchmarkLeaseHit's acquire-on mode with the drain model (one
// more clock read, a compare-and-swap on Acquire, a short lock on Done).
func BenchmarkLeaseHitDrain(b *testing.B) {
	ids := benchSessionIDs(benchSessions)
	for _, n := range []int{8, 64} {
		bs := backends(b, n)
		for _, mode := range []string{"acquire-on", "acquire-drain"} {
			cfg := loadCfg(1.25, 5)
			if mode == "acquire-drain" {
				cfg = drainCfg(1.25, 5, 16000, 2.5)
			}
			s := newBenchScheduler(b, cfg)
			for _, id := range ids {
				if _, _, err := s.SelectBackend(id, "", bs); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(fmt.Sprintf("mode=%s/cands=%d", mode, n), func(b *testing.B) {
				var l affinity.Lease // the caller's, reused
				benchmin.Batched(b, func(i int) {
					err := s.Acquire(ids[i&(benchSessions-1)], "", bs, 1000, &l)
					if err != nil || l.Outcome != affinity.OutcomeHit {
						b.Fatal("not a hit", l.Outcome, err)
					}
					l.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 900, CacheReported: true})
				})
			})
		}
	}
}
