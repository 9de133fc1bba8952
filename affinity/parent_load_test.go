package affinity_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// parentOn binds "parent" to backend pb and reports one hit's usage on it (prompt and
// cached prompt tokens; prompt 0: none), so that the parent's binding carries the
// reprefill estimate the spill guard reads. It returns after the hit's lease is done.
func parentOn(t *testing.T, s *affinity.Scheduler, pb string, bs []affinity.Backend, prompt, cached int64) {
	t.Helper()
	require.NoError(t, s.Table().Bind("parent", "", pb))
	l, err := acquire(s, "parent", "", bs, 100)
	require.NoError(t, err)
	require.Equal(t, pb, l.Backend.ID())
	require.True(t, l.AffinityHit)
	l.Done(affinity.DoneInfo{PromptTokens: prompt, CachedPromptTokens: cached, CacheReported: true})
}

// holdLoad leases cost prompt tokens on each backend of bs (by index), never released:
// the outstanding load the placements see.
func holdLoad(t *testing.T, s *affinity.Scheduler, bs []affinity.Backend, load map[int]int64) {
	t.Helper()
	for i, c := range load {
		var l affinity.Lease
		require.NoError(t, s.LeaseBackend(bs[i], c, &l))
	}
}

// TestAcquireWithParentSpillGuard: with load awareness on, the parent hint of a child's
// first turn passes the spill guard a hit on the parent's backend would face, with the
// parent binding's reprefill estimate as the prefix the child shares. The child's HRW
// winner is another backend (b01), so PlacedHRW lands there when the walk is not bent.
func TestAcquireWithParentSpillGuard(t *testing.T) {
	const childCost = 1000 // the parent's warm prompt (2000, rounded to 2048) is longer: rp = 1000
	on := func(w float64) affinity.Config { return loadCfg(1.25, w) }
	tests := []struct {
		name           string
		cfg            affinity.Config
		prompt, cached int64         // the parent's last hit's usage (prompt 0: none reported)
		load           map[int]int64 // outstanding prompt tokens by backend index (b00 is the parent's)
		advance        time.Duration // clock advance after the load is leased
		want           affinity.Placement
	}{
		{name: "parent's backend idle", cfg: on(1), prompt: 2000, cached: 1900,
			want: affinity.PlacedParent},
		{name: "busy, waiting costs less than re-prefilling", cfg: on(1), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 900}, want: affinity.PlacedParent},
		{name: "busy, waiting costs exactly the prefix", cfg: on(1), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 1000}, want: affinity.PlacedParent},
		{name: "every backend as busy: not over the bound", cfg: on(1), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 5000, 1: 5000, 2: 5000}, want: affinity.PlacedParent},
		{name: "over w x prefix but within the bound", cfg: on(1), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 6000, 1: 5000, 2: 5000}, want: affinity.PlacedParent},
		{name: "over the bound, waiting costs more than re-prefilling", cfg: on(1), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 10000}, want: affinity.PlacedHRW},
		{name: "over the bound and w x prefix, the others busy too", cfg: on(5), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 10000, 1: 5500, 2: 5500}, want: affinity.PlacedHRW},
		{name: "over the bound within w x prefix", cfg: on(5), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 5000}, want: affinity.PlacedParent},
		{name: "no usage reported: the prefix is the child's cost", cfg: on(1),
			load: map[int]int64{0: 10000}, want: affinity.PlacedHRW},
		{name: "no usage reported, busy within w x cost", cfg: on(1),
			load: map[int]int64{0: 999}, want: affinity.PlacedParent},
		{name: "cold parent: one token of load declines", cfg: on(1), prompt: 2000, cached: 0,
			load: map[int]int64{0: 1}, want: affinity.PlacedHRW},
		{name: "cold parent, backend idle", cfg: on(1), prompt: 2000, cached: 0,
			want: affinity.PlacedParent},
		{name: "spill disabled: the hint ignores load", prompt: 2000, cached: 1900,
			cfg:  affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25, DisableSpill: true}},
			load: map[int]int64{0: 100000}, want: affinity.PlacedParent},
		{name: "load awareness off: the hint ignores load", cfg: affinity.Config{}, prompt: 2000, cached: 1900,
			load: map[int]int64{0: 100000}, want: affinity.PlacedParent},
		{name: "drain model: queue not drained yet", cfg: drainCfg(1.25, 1, 1000, 0), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 10000}, want: affinity.PlacedHRW},
		{name: "drain model: queue drained", cfg: drainCfg(1.25, 1, 1000, 0), prompt: 2000, cached: 1900,
			load: map[int]int64{0: 10000}, advance: 20 * time.Second, want: affinity.PlacedParent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newSched(t, tt.cfg)
			bs := backendsN(3)
			pb := bs[0].ID()
			child := sessionOn(t, "child", bs[1].ID(), bs)
			parentOn(t, s, pb, bs, tt.prompt, tt.cached)
			holdLoad(t, s, bs, tt.load)
			clk.Advance(tt.advance)
			before := s.Stats()

			l, p, err := acquireWithParent(s, child, "parent", "", bs, childCost)
			require.NoError(t, err)
			defer l.Done(affinity.DoneInfo{})
			st := s.Stats()
			assert.Equal(t, tt.want, p)
			assert.Equal(t, affinity.OutcomeMiss, l.Outcome)
			assert.Zero(t, st.Broken.Total(), "the child had no binding: nothing is broken")
			assert.Equal(t, before.Misses+1, st.Misses)
			if tt.want == affinity.PlacedParent {
				assert.Equal(t, pb, l.Backend.ID())
				assert.Equal(t, before.ParentPlaced+1, st.ParentPlaced)
			} else {
				assert.Equal(t, bs[1].ID(), l.Backend.ID(), "declined: the walk places the child on its HRW winner")
				assert.Equal(t, before.ParentPlaced, st.ParentPlaced, "a declined hint is not counted")
			}
			id, ok := s.Lookup(child, "")
			require.True(t, ok)
			assert.Equal(t, l.Backend.ID(), id, "the child is bound where it is leased")
		})
	}
}

// TestAcquireWithParentRetention: with the drain model, the prefix the guard protects is
// what the parent's backend is expected to retain after the parent's idle time: past
// retention_guard_factor x the learned retention it is 0, and any load declines the hint.
func TestAcquireWithParentRetention(t *testing.T) {
	tests := []struct {
		name string
		idle time.Duration // the parent's idle time when the child arrives (retention: 10 s)
		want affinity.Placement
	}{
		{name: "within the retention: the prefix is protected", idle: 5 * time.Second, want: affinity.PlacedParent},
		{name: "past the guard factor: nothing to wait for", idle: 25 * time.Second, want: affinity.PlacedHRW},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newSched(t, drainCfg(1.25, 1, 1000, 2))
			bs := backendsN(3)
			pb := bs[0].ID()
			child := sessionOn(t, "child", bs[1].ID(), bs)
			// Teach b00 a retention of 10 s: a hit idle 10 s finds its prefix lost.
			require.NoError(t, s.Table().Bind("other", "", pb))
			for _, cached := range []int64{1900, 0} {
				l, err := acquire(s, "other", "", bs, 100)
				require.NoError(t, err)
				require.True(t, l.AffinityHit)
				l.Done(affinity.DoneInfo{PromptTokens: 2000, CachedPromptTokens: cached, CacheReported: true})
				clk.Advance(10 * time.Second)
			}
			require.Equal(t, 10*time.Second, s.Drain(pb).CacheRetention)
			parentOn(t, s, pb, bs, 2000, 1900)
			clk.Advance(tt.idle)
			holdLoad(t, s, bs, map[int]int64{0: 500}) // within w x prefix (1000) when protected

			l, p, err := acquireWithParent(s, child, "parent", "", bs, 1000)
			require.NoError(t, err)
			defer l.Done(affinity.DoneInfo{})
			assert.Equal(t, tt.want, p)
			if tt.want == affinity.PlacedParent {
				assert.Equal(t, pb, l.Backend.ID())
			} else {
				assert.Equal(t, bs[1].ID(), l.Backend.ID())
			}
		})
	}
}

// TestAcquireWithParentDeclinedIsAcquire: children whose parent's backend is loaded
// beyond the guard are placed exactly as Acquire places them (the bounded-load walk
// along each child's ranking, nothing counted as parent-placed or broken), and the same
// way by two Schedulers fed the same load.
func TestAcquireWithParentDeclinedIsAcquire(t *testing.T) {
	bs := backendsN(3)
	pb := bs[0].ID()
	var twins [2]*affinity.Scheduler
	for i := range twins {
		twins[i], _ = newSched(t, loadCfg(1.25, 1))
		parentOn(t, twins[i], pb, bs, 2000, 1900)
		holdLoad(t, twins[i], bs, map[int]int64{0: 10000})
	}
	plain, _ := newSched(t, loadCfg(1.25, 1)) // the same load, no parent hint
	parentOn(t, plain, pb, bs, 2000, 1900)
	holdLoad(t, plain, bs, map[int]int64{0: 10000})

	for i := range 12 {
		child := fmt.Sprintf("kid%d", i)
		var got [2]string
		for j, s := range twins {
			l, p, err := acquireWithParent(s, child, "parent", "", bs, 1000)
			require.NoError(t, err)
			assert.Equal(t, affinity.PlacedHRW, p, "%s: declined", child)
			got[j] = l.Backend.ID() // the lease is held: the next child sees it
		}
		l, err := acquire(plain, child, "", bs, 1000)
		require.NoError(t, err)
		assert.Equal(t, got[0], got[1], "%s: twins agree", child)
		assert.Equal(t, l.Backend.ID(), got[0], "%s: placed as Acquire places it", child)
		assert.NotEqual(t, pb, got[0], "%s: not on the parent's overloaded backend", child)
	}
	for _, s := range twins {
		st := s.Stats()
		assert.Zero(t, st.ParentPlaced)
		assert.Zero(t, st.Broken.Total())
		assert.Equal(t, plain.Stats().Misses, st.Misses)
	}
}

// TestAcquireWithParentFlood: 24 subagents of one parent opened at once, their leases
// held (long streams), no longer all land on the parent's backend: it takes children
// while its wait is within spill_cost_weight x the shared prefix or it is within the
// bound, and the rest are placed by the bounded-load walk, so every backend ends within
// balance_factor x the mean load, as the same flood of new sessions does.
func TestAcquireWithParentFlood(t *testing.T) {
	const (
		n      = 24
		cost   = 1000 // each child's first turn; the parent's prompt (2000) covers it: rp = 1000
		factor = 1.25
	)
	for _, weight := range []float64{1, 5} { // 5: the default spill_cost_weight
		t.Run(fmt.Sprintf("spill_cost_weight=%v", weight), func(t *testing.T) {
			bs := backendsN(3)
			pb := bs[0].ID()
			s, _ := newSched(t, loadCfg(factor, weight))
			parentOn(t, s, pb, bs, 2000, 1900)
			fresh, _ := newSched(t, loadCfg(factor, weight)) // the same flood as new sessions
			onParent := 0
			for i := range n {
				_, p, err := acquireWithParent(s, fmt.Sprintf("sub%d", i), "parent", "", bs, cost)
				require.NoError(t, err)
				if p == affinity.PlacedParent {
					onParent++
				}
				_, err = acquire(fresh, fmt.Sprintf("new%d", i), "", bs, cost)
				require.NoError(t, err) // leases held: the flood's streams are long
			}
			assert.Less(t, onParent, n, "not every child on the parent's backend")
			assert.Positive(t, onParent, "the first children follow the parent's warm cache")
			st := s.Stats()
			assert.Equal(t, uint64(onParent), st.ParentPlaced)
			assert.Zero(t, st.Broken.Total())

			bound := factor * float64(n*cost) / float64(len(bs))
			for _, b := range bs {
				assert.LessOrEqual(t, float64(s.Load(b.ID()).Cost), bound, "children on %s", b.ID())
				assert.LessOrEqual(t, float64(fresh.Load(b.ID()).Cost), bound, "new sessions on %s", b.ID())
			}
		})
	}
}

// TestAcquireWithParentConcurrentUsage: children read the parent's binding (its backend
// and reprefill inputs) while the parent's own turns write them (Done's usage) and other
// sessions load its backend; run with -race. Each child is placed once, on a candidate.
func TestAcquireWithParentConcurrentUsage(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	bs := backendsN(3)
	parentOn(t, s, bs[0].ID(), bs, 2000, 1900)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // the parent's turns: alternately warm and cold usage
		defer wg.Done()
		for i := range 200 {
			l, err := acquire(s, "parent", "", bs, 500)
			if !assert.NoError(t, err) {
				return
			}
			l.Done(affinity.DoneInfo{PromptTokens: 2000, CachedPromptTokens: int64(i%2) * 1900, CacheReported: true})
		}
	}()
	go func() { // other sessions come and go
		defer wg.Done()
		for i := range 200 {
			l, err := acquire(s, fmt.Sprintf("load%d", i%7), "", bs, 3000)
			if !assert.NoError(t, err) {
				return
			}
			l.Done(affinity.DoneInfo{})
		}
	}()
	placed := make([]string, 200)
	go func() { // the children
		defer wg.Done()
		for i := range placed {
			l, _, err := acquireWithParent(s, fmt.Sprintf("sub%d", i), "parent", "", bs, 1000)
			if !assert.NoError(t, err) {
				return
			}
			placed[i] = l.Backend.ID()
			l.Done(affinity.DoneInfo{})
		}
	}()
	wg.Wait()
	for i, id := range placed {
		got, ok := s.Lookup(fmt.Sprintf("sub%d", i), "")
		assert.True(t, ok)
		assert.Equal(t, id, got)
	}
}
