package affinity_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

var leaseEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func backendsN(n int) []affinity.Backend {
	bs := make([]affinity.Backend, n)
	for i := range bs {
		bs[i] = affinity.MustBackend(fmt.Sprintf("b%02d", i), fmt.Sprintf("http://10.0.0.%d", i), 1)
	}
	return bs
}

func loadCfg(factor, weight float64) affinity.Config {
	return affinity.Config{Load: affinity.LoadConfig{BalanceFactor: factor, SpillCostWeight: affinity.SpillWeight(weight)}}
}

// acquire is Acquire into a new Lease, for tests that keep leases beyond the call.
func acquire(s *affinity.Scheduler, session, tier string, cands []affinity.Backend, cost int64) (*affinity.Lease, error) {
	l := new(affinity.Lease)
	return l, s.Acquire(session, tier, cands, cost, l)
}

// acquireWithParent is AcquireWithParent into a new Lease.
func acquireWithParent(s *affinity.Scheduler, session, parent, tier string, cands []affinity.Backend, cost int64) (*affinity.Lease, affinity.Placement, error) {
	l := new(affinity.Lease)
	p, err := s.AcquireWithParent(session, parent, tier, cands, cost, l)
	return l, p, err
}

func newSched(t testing.TB, cfg affinity.Config, opts ...affinity.Option) (*affinity.Scheduler, *affinitytest.Clock) {
	t.Helper()
	clk := affinitytest.NewClock(leaseEpoch)
	s, err := affinity.New(cfg, append([]affinity.Option{affinity.WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return s, clk
}

// TestAcquireLoadOffDecidesAsSelectBackend replays one random sequence of calls (new and
// returning sessions, candidate subsets and orders, health changes, TTL expiry, tiers
// with TTL 0) through SelectBackend on one Scheduler and Acquire on another, load
// awareness off: every decision, hit flag, error and counter must agree.
func TestAcquireLoadOffDecidesAsSelectBackend(t *testing.T) {
	cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(60),
		Tiers: map[string]affinity.TierConfig{"off": {StickyTTLSeconds: affinity.TTLSeconds(0)}}}
	sel, clkA := newSched(t, cfg)
	acq, clkB := newSched(t, cfg)
	all := backendsN(6)
	rng := rand.New(rand.NewPCG(1, 2))
	var leases []*affinity.Lease
	for step := range 20000 {
		switch k := rng.IntN(100); {
		case k < 3:
			id := all[rng.IntN(len(all))].ID()
			require.Equal(t, sel.OnBackendDown(id), acq.OnBackendDown(id))
		case k < 6:
			id := all[rng.IntN(len(all))].ID()
			sel.OnBackendUp(id)
			acq.OnBackendUp(id)
		case k < 7:
			id := all[rng.IntN(len(all))].ID()
			sel.OnBackendDraining(id)
			acq.OnBackendDraining(id)
		case k < 10:
			d := time.Duration(rng.IntN(40)) * time.Second
			clkA.Advance(d)
			clkB.Advance(d)
		default:
			cands := append([]affinity.Backend(nil), all...)
			rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
			cands = cands[:1+rng.IntN(len(cands))]
			session := fmt.Sprintf("s%d", rng.IntN(300))
			tier := [...]string{"", "gold", "off"}[rng.IntN(3)]
			b, hit, err1 := sel.SelectBackend(session, tier, cands)
			l, err2 := acquire(acq, session, tier, cands, int64(rng.IntN(5000)))
			require.Equal(t, err1 == nil, err2 == nil, "step %d: errors %v / %v", step, err1, err2)
			if err1 != nil {
				require.True(t, errors.Is(err2, affinity.ErrNoEligibleBackend) && errors.Is(err1, affinity.ErrNoEligibleBackend))
				continue
			}
			require.Equal(t, b.ID(), l.Backend.ID(), "step %d", step)
			require.Equal(t, hit, l.AffinityHit, "step %d", step)
			require.Equal(t, hit, l.Outcome == affinity.OutcomeHit, "step %d: outcome %v", step, l.Outcome)
			leases = append(leases, l)
			if rng.IntN(2) == 0 { // release some at once, the rest at the end
				l.Done(affinity.DoneInfo{})
			}
		}
	}
	assert.Equal(t, sel.Stats(), acq.Stats())
	for _, l := range leases {
		l.Done(affinity.DoneInfo{})
	}
	for _, b := range all {
		assert.Equal(t, affinity.LoadSnapshot{}, acq.Load(b.ID()), b.ID())
	}
}

func TestLeaseDoneIdempotent(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	bs := backendsN(3)
	var l affinity.Lease
	require.NoError(t, s.Acquire("s1", "", bs, 700, &l))
	assert.Equal(t, affinity.OutcomeMiss, l.Outcome)
	id := l.Backend.ID()
	assert.Equal(t, affinity.LoadSnapshot{Requests: 1, Cost: 700}, s.Load(id))

	shared := &l // every holder of the *Lease may call Done
	l.Done(affinity.DoneInfo{})
	shared.Done(affinity.DoneInfo{})
	l.Done(affinity.DoneInfo{})
	assert.Equal(t, affinity.LoadSnapshot{}, s.Load(id), "released once")

	// The Lease is filled again after its Done; the old Done calls are over.
	require.NoError(t, s.Acquire("s1", "", bs, 0, &l))
	assert.Equal(t, affinity.OutcomeHit, l.Outcome)
	assert.True(t, l.AffinityHit)
	assert.Equal(t, affinity.LoadSnapshot{Requests: 1, Cost: 1}, s.Load(id), "cost 0 counts 1")

	// An open Lease cannot be filled again: that would lose its load.
	err := s.Acquire("s9", "", bs, 5, &l)
	require.ErrorIs(t, err, affinity.ErrInvalidLease)
	assert.Equal(t, affinity.OutcomeHit, l.Outcome, "unchanged")
	_, err = s.AcquireWithParent("s9", "s1", "", bs, 5, &l)
	require.ErrorIs(t, err, affinity.ErrInvalidLease)
	assert.Equal(t, affinity.LoadSnapshot{Requests: 1, Cost: 1}, s.Load(id), "nothing leased")

	// Done after OnBackendDown releases the load; bindings are gone, Done does not care.
	assert.Equal(t, 1, s.OnBackendDown(id))
	l.Done(affinity.DoneInfo{PromptTokens: 100, CachedPromptTokens: 90, CacheReported: true})
	assert.Equal(t, affinity.LoadSnapshot{}, s.Load(id))

	new(affinity.Lease).Done(affinity.DoneInfo{}) // zero Lease: no-op
	var none *affinity.Lease
	none.Done(affinity.DoneInfo{}) // nil: no-op
	require.ErrorIs(t, s.Acquire("s2", "", bs, 1, nil), affinity.ErrInvalidLease)
	_, err = s.AcquireWithParent("s2", "", "", bs, 1, nil)
	require.ErrorIs(t, err, affinity.ErrInvalidLease)

	// From other goroutines, concurrently: released once.
	l3, err := acquire(s, "s2", "", bs, 10)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); l3.Done(affinity.DoneInfo{}) }()
	}
	wg.Wait()
	assert.Equal(t, affinity.LoadSnapshot{}, s.Load(l3.Backend.ID()))
	st := s.Stats()
	assert.Equal(t, [2]uint64{1, 2}, [2]uint64{st.Hits, st.Misses}, "the refused calls counted nothing")
}

func TestAcquireErrors(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	bs := backendsN(2)
	tests := []struct {
		name    string
		session string
		cands   []affinity.Backend
		cost    int64
		want    error
	}{
		{"negative cost", "s", bs, -1, affinity.ErrInvalidCost},
		{"empty session", "", bs, 1, affinity.ErrEmptySessionID},
		{"no candidates", "s", nil, 1, affinity.ErrNoCandidates},
		{"zero backend", "s", []affinity.Backend{bs[0], {}}, 1, affinity.ErrInvalidBackend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := acquire(s, tt.session, "", tt.cands, tt.cost)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, &affinity.Lease{}, l, "nothing filled")
		})
	}
	for _, id := range []string{"b00", "b01"} {
		s.OnBackendDown(id)
	}
	_, err := acquire(s, "s", "", bs, 1)
	require.ErrorIs(t, err, affinity.ErrNoEligibleBackend)
	assert.Equal(t, affinity.Stats{}, s.Stats(), "nothing counted")
	for _, b := range bs {
		assert.Equal(t, affinity.LoadSnapshot{}, s.Load(b.ID()), "nothing leased")
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[affinity.Outcome]string{affinity.OutcomeHit: "hit", affinity.OutcomeMiss: "miss",
		affinity.OutcomeRebind: "rebind", affinity.OutcomeSpill: "spill", 0: "Outcome(0)"} {
		assert.Equal(t, want, o.String())
	}
}

func TestLeaseCostClamped(t *testing.T) {
	s, _ := newSched(t, affinity.Config{})
	bs := backendsN(2)
	l, err := acquire(s, "s", "", bs, 1<<50)
	require.NoError(t, err)
	assert.Equal(t, affinity.LoadSnapshot{Requests: 1, Cost: affinity.MaxLeaseCost}, s.Load(l.Backend.ID()))
	l.Done(affinity.DoneInfo{})
	assert.Equal(t, affinity.LoadSnapshot{}, s.Load(l.Backend.ID()))
}

// TestLeaseHitZeroAllocs: Acquire+Done on a hit into a Lease the caller reuses allocates
// nothing, with load awareness off and on, at 8 and 64 candidates, with and without
// usage reported to Done (and with a prompt but no cached count).
func TestLeaseHitZeroAllocs(t *testing.T) {
	for _, n := range []int{8, 64} {
		for _, tc := range []struct {
			name string
			cfg  affinity.Config
			info affinity.DoneInfo
		}{
			{"off", affinity.Config{}, affinity.DoneInfo{}},
			{"off/usage", affinity.Config{}, affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 900, CacheReported: true}},
			{"on", loadCfg(1.25, 1), affinity.DoneInfo{}},
			{"on/usage", loadCfg(1.25, 1), affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 900, CacheReported: true}},
			{"on/unreported", loadCfg(1.25, 1), affinity.DoneInfo{PromptTokens: 1000}},
		} {
			t.Run(fmt.Sprintf("%s/cands=%d", tc.name, n), func(t *testing.T) {
				s, _ := newSched(t, tc.cfg)
				bs := backendsN(n)
				var l affinity.Lease
				require.NoError(t, s.Acquire("s", "", bs, 1000, &l))
				l.Done(tc.info)
				allocs := testing.AllocsPerRun(500, func() {
					if err := s.Acquire("s", "", bs, 1000, &l); err != nil || !l.AffinityHit {
						t.Fatal("not a hit", l.Outcome, err)
					}
					l.Done(tc.info)
				})
				assert.Zero(t, allocs)
				assert.Equal(t, affinity.LoadSnapshot{}, s.Load(l.Backend.ID()), "released")
			})
		}
	}
}

// LeaseBackend charges the given backend and nothing else: no binding, no counter, no
// reuse; bad arguments lease nothing. With the drain model on its Done feeds the model
// like any lease.
func TestLeaseBackend(t *testing.T) {
	for _, cfg := range []struct {
		name string
		cfg  affinity.Config
	}{
		{"load off", affinity.Config{}},
		{"load on", loadCfg(1.25, 1)},
		{"drain model", drainCfg(1.25, 5, 10000, 0)},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			s, _ := newSched(t, cfg.cfg)
			b := affinity.MustBackend("b", "", 1)
			var open affinity.Lease
			require.NoError(t, s.LeaseBackend(b, 10, &open))
			errs := []struct {
				name string
				b    affinity.Backend
				cost int64
				l    *affinity.Lease
				want error
			}{
				{"nil lease", b, 1, nil, affinity.ErrInvalidLease},
				{"open lease", b, 1, &open, affinity.ErrInvalidLease},
				{"negative cost", b, -1, new(affinity.Lease), affinity.ErrInvalidCost},
				{"zero backend", affinity.Backend{}, 1, new(affinity.Lease), affinity.ErrInvalidBackend},
			}
			for _, tc := range errs {
				require.ErrorIs(t, s.LeaseBackend(tc.b, tc.cost, tc.l), tc.want, tc.name)
			}
			assert.Equal(t, affinity.LoadSnapshot{Requests: 1, Cost: 10}, s.Load("b"), "only the first lease counts")

			for cost, want := range map[int64]int64{0: 1, affinity.MaxLeaseCost + 5: affinity.MaxLeaseCost} {
				var l affinity.Lease
				require.NoError(t, s.LeaseBackend(b, cost, &l))
				assert.Equal(t, want, s.Load("b").Cost-10, "cost %d", cost)
				assert.Equal(t, affinity.OutcomeMiss, l.Outcome)
				assert.False(t, l.AffinityHit)
				assert.Equal(t, "b", l.Backend.ID())
				l.Done(affinity.DoneInfo{PromptTokens: 500, CachedPromptTokens: 400, CacheReported: true})
			}
			open.Done(affinity.DoneInfo{PromptTokens: 500, CacheReported: true})
			assert.Equal(t, affinity.LoadSnapshot{}, s.Load("b"), "every lease released")
			st := s.Stats()
			assert.Zero(t, st.Hits+st.Misses+st.Broken.Total(), "nothing counted")
			assert.Zero(t, s.Len(), "nothing bound")
			assert.Zero(t, s.Reuse("").PromptTokens, "reuse is for hits on a binding")
			var l affinity.Lease
			allocs := testing.AllocsPerRun(100, func() {
				_ = s.LeaseBackend(b, 5, &l)
				l.Done(affinity.DoneInfo{PromptTokens: 10, CacheReported: true})
			})
			assert.Zero(t, allocs, "LeaseBackend+Done into a reused Lease")
		})
	}
}
