package affinity_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/metrics"
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
	l.Done(affinity.DoneInfo{PromptTokens: 100, CachedPromptTokens: 90})
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

// TestBoundedLoadFlood: thousands of new sessions arrive while none completes, many of
// them hot keys (sessions whose HRW winner is the same backend). After every placement
// no backend holds more than balance_factor x the mean, unless it held nothing before.
func TestBoundedLoadFlood(t *testing.T) {
	for _, factor := range []float64{1.0, 1.25, 2} {
		t.Run(fmt.Sprint(factor), func(t *testing.T) {
			s, _ := newSched(t, loadCfg(factor, 1))
			bs := backendsN(8)
			ref, _ := newSched(t, affinity.Config{})
			// Hot keys: sessions whose plain HRW winner is b00.
			var hot []string
			for i := 0; len(hot) < 2000; i++ {
				id := fmt.Sprintf("hot%d", i)
				if b, _, _ := ref.SelectBackend(id, "", bs); b.ID() == "b00" {
					hot = append(hot, id)
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			var total int64
			for i, id := range hot {
				cost := int64(100 + rng.IntN(900))
				before := map[string]int64{}
				least := int64(-1)
				for _, b := range bs {
					before[b.ID()] = s.Load(b.ID()).Cost
					if least < 0 || before[b.ID()] < least {
						least = before[b.ID()]
					}
				}
				l, err := acquire(s, id, "", bs, cost)
				require.NoError(t, err)
				total += cost
				got := s.Load(l.Backend.ID()).Cost
				bound := factor * float64(total) / float64(len(bs))
				// Within the bound, or idle before, or — when no backend had room — the
				// least loaded.
				if float64(got) > bound+1e-9 && got != cost {
					require.Equal(t, least, before[l.Backend.ID()],
						"request %d: %s holds %d, bound %.1f, yet it was not the least loaded", i, l.Backend.ID(), got, bound)
					for _, b := range bs {
						require.Greater(t, float64(before[b.ID()]+cost), bound-1e-9, "request %d: %s had room", i, b.ID())
					}
				}
			}
			var maxLoad int64
			for _, b := range bs {
				maxLoad = max(maxLoad, s.Load(b.ID()).Cost)
			}
			assert.LessOrEqual(t, float64(maxLoad), factor*float64(total)/8+1000, "max %d", maxLoad)
		})
	}
}

// TestLoadDeterminism: two Schedulers (two gateway replicas) fed the same requests and
// the same load reports place and spill every session identically.
func TestLoadDeterminism(t *testing.T) {
	var rs [2]*affinity.Scheduler
	for k := range rs {
		rs[k], _ = newSched(t, loadCfg(1.2, 0.5))
	}
	bs := backendsN(7)
	rng := rand.New(rand.NewPCG(5, 6))
	type open struct{ l [2]*affinity.Lease }
	var live []open
	spills := 0
	for step := range 6000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(live))
			info := affinity.DoneInfo{PromptTokens: 2000, CachedPromptTokens: int64(rng.IntN(2000))}
			for k := range rs {
				live[j].l[k].Done(info)
			}
			live = append(live[:j], live[j+1:]...)
			continue
		}
		if rng.IntN(50) == 0 {
			rep := affinity.BackendLoad{Waiting: int64(rng.IntN(20)), Running: int64(rng.IntN(20))}
			id := bs[rng.IntN(len(bs))].ID()
			for k := range rs {
				require.NoError(t, rs[k].ReportLoad(id, rep))
			}
		}
		session := fmt.Sprintf("s%d", rng.IntN(400))
		cost := int64(1 + rng.IntN(8000))
		var o open
		for k := range rs {
			l, err := acquire(rs[k], session, "", bs, cost)
			require.NoError(t, err)
			o.l[k] = l
		}
		require.Equal(t, o.l[0].Backend.ID(), o.l[1].Backend.ID(), "step %d", step)
		require.Equal(t, o.l[0].Outcome, o.l[1].Outcome, "step %d", step)
		if o.l[0].Outcome == affinity.OutcomeSpill {
			spills++
		}
		live = append(live, o)
	}
	assert.Equal(t, rs[0].Stats(), rs[1].Stats())
	assert.Positive(t, spills, "the run exercised spills")
	t.Logf("spills: %d, stats %+v", spills, rs[0].Stats())
}

// TestSpill: an overloaded binding moves to the next backend of its own ranking that is
// under the bound, counted once as broken{overloaded}; the guard keeps it when the wait
// saved is not worth the prefix; a binding whose cache is lost moves for free.
func TestSpill(t *testing.T) {
	bs := backendsN(4)
	setup := func(t *testing.T, weight float64) (*affinity.Scheduler, *metrics.Recording, *affinity.Lease) {
		rec := &metrics.Recording{}
		s, _ := newSched(t, loadCfg(1.5, weight), affinity.WithRecorder(rec))
		l, err := acquire(s, "sess", "gold", bs, 1000)
		require.NoError(t, err)
		l.Done(affinity.DoneInfo{PromptTokens: 1000})
		return s, rec, l
	}
	// pile puts cost on backend id through other sessions' leases (bypassing placement
	// with a single candidate).
	pile := func(t *testing.T, s *affinity.Scheduler, id string, cost int64) {
		for _, b := range bs {
			if b.ID() == id {
				_, err := acquire(s, "pile-"+id+fmt.Sprint(cost), "", []affinity.Backend{b}, cost)
				require.NoError(t, err)
			}
		}
	}
	t.Run("moves down the ranking", func(t *testing.T) {
		s, rec, first := setup(t, 1)
		home := first.Backend.ID()
		pile(t, s, home, 50000)
		l, err := acquire(s, "sess", "gold", bs, 1000)
		require.NoError(t, err)
		assert.Equal(t, affinity.OutcomeSpill, l.Outcome)
		assert.False(t, l.AffinityHit)
		assert.NotEqual(t, home, l.Backend.ID())
		assert.Equal(t, 1, rec.CountBroken("gold", metrics.ReasonOverloaded))
		assert.Equal(t, uint64(1), s.Stats().Broken.Overloaded)
		l.Done(affinity.DoneInfo{})
		// The new binding sticks, even once home is idle again (no failback).
		l2, err := acquire(s, "sess", "gold", bs, 1000)
		require.NoError(t, err)
		assert.Equal(t, affinity.OutcomeHit, l2.Outcome)
		assert.Equal(t, l.Backend.ID(), l2.Backend.ID())
	})
	t.Run("guard keeps a warm prefix", func(t *testing.T) {
		s, rec, first := setup(t, 100) // moving costs 100 x 1000 tokens of waiting
		pile(t, s, first.Backend.ID(), 50000)
		l, err := acquire(s, "sess", "gold", bs, 1000)
		require.NoError(t, err)
		assert.Equal(t, affinity.OutcomeHit, l.Outcome)
		assert.Equal(t, 0, rec.CountBroken("gold", metrics.ReasonOverloaded))
	})
	t.Run("lost cache moves for free", func(t *testing.T) {
		s, rec, first := setup(t, 100)
		// A hit that reports no cached tokens: the backend evicted the prefix.
		l, err := acquire(s, "sess", "gold", bs, 1000)
		require.NoError(t, err)
		require.Equal(t, affinity.OutcomeHit, l.Outcome)
		l.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 0})
		pile(t, s, first.Backend.ID(), 50000)
		l, err = acquire(s, "sess", "gold", bs, 1000)
		require.NoError(t, err)
		assert.Equal(t, affinity.OutcomeSpill, l.Outcome)
		assert.Equal(t, 1, rec.CountBroken("gold", metrics.ReasonOverloaded))
		assert.Equal(t, affinity.TierReuse{PromptTokens: 1000}, s.Reuse("gold"))
	})
	// The guard's edge, where a hit decides from its own backend's load alone: with the
	// others idle, wait(bound) - wait(target) = wait(bound), so the session stays at
	// wait = weight x reprefill and moves one token above it.
	for _, tc := range []struct {
		wait int64
		want affinity.Outcome
	}{{1000, affinity.OutcomeHit}, {1001, affinity.OutcomeSpill}} {
		t.Run(fmt.Sprintf("guard edge wait=%d", tc.wait), func(t *testing.T) {
			s, _, first := setup(t, 1) // reprefill min(1000, 1000) x weight 1
			pile(t, s, first.Backend.ID(), tc.wait)
			l, err := acquire(s, "sess", "gold", bs, 1000)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l.Outcome)
		})
	}
	t.Run("spill disabled", func(t *testing.T) {
		cfg := loadCfg(1.5, 0)
		cfg.Load.DisableSpill = true
		s, _ := newSched(t, cfg)
		l, err := acquire(s, "sess", "", bs, 1000)
		require.NoError(t, err)
		pile(t, s, l.Backend.ID(), 50000)
		l2, err := acquire(s, "sess", "", bs, 1000)
		require.NoError(t, err)
		assert.Equal(t, affinity.OutcomeHit, l2.Outcome)
	})
}

// TestSpillNoPingPong: the load alternates between two backends every turn; a session
// moves at most once per backend of its ranking, never back.
func TestSpillNoPingPong(t *testing.T) {
	bs := backendsN(2)
	s, _ := newSched(t, loadCfg(1.1, 0))
	l, err := acquire(s, "sess", "", bs, 100)
	require.NoError(t, err)
	l.Done(affinity.DoneInfo{})
	a := l.Backend
	b := bs[0]
	if b.ID() == a.ID() {
		b = bs[1]
	}
	moves := 0
	prev := a.ID()
	for turn := range 40 {
		heavy := a
		if turn%2 == 1 {
			heavy = b
		}
		p, err := acquire(s, fmt.Sprintf("pile%d", turn), "", []affinity.Backend{heavy}, 100000)
		require.NoError(t, err)
		l, err := acquire(s, "sess", "", bs, 100)
		require.NoError(t, err)
		if l.Backend.ID() != prev {
			moves++
			prev = l.Backend.ID()
		}
		l.Done(affinity.DoneInfo{})
		p.Done(affinity.DoneInfo{})
	}
	assert.Equal(t, 1, moves, "one move down the ranking, never back")
	assert.Equal(t, uint64(1), s.Stats().Broken.Overloaded)
}

func TestReportLoad(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	require.ErrorIs(t, s.ReportLoad("", affinity.BackendLoad{}), affinity.ErrInvalidLoad)
	require.ErrorIs(t, s.ReportLoad("b00", affinity.BackendLoad{Waiting: -1}), affinity.ErrInvalidLoad)
	require.ErrorIs(t, s.ReportLoad("b00", affinity.BackendLoad{KVCache: 1.5}), affinity.ErrInvalidLoad)
	bs := backendsN(2)
	// Find a session whose HRW winner is b00, then report b00 busy: placement avoids it.
	ref, _ := newSched(t, affinity.Config{})
	var sid string
	for i := 0; ; i++ {
		sid = fmt.Sprintf("s%d", i)
		if b, _, _ := ref.SelectBackend(sid, "", bs); b.ID() == "b00" {
			break
		}
	}
	require.NoError(t, s.ReportLoad("b00", affinity.BackendLoad{Waiting: 30, Running: 8, KVCache: 0.9}))
	assert.Equal(t, affinity.LoadSnapshot{Reported: 38, KVCache: 0.9}, s.Load("b00"))
	require.NoError(t, s.ReportLoad("b01", affinity.BackendLoad{Running: 1}))
	l, err := acquire(s, sid, "", bs, 500)
	require.NoError(t, err)
	assert.Equal(t, "b01", l.Backend.ID(), "38 reported requests x 1024 tokens outweigh b01's one")
	l.Done(affinity.DoneInfo{})
}

// A report counts the requests beyond the leases open when it arrives: the backend's own
// leased request seen running by a scrape does not linger as a phantom queued request
// once its lease ends, and leases opened after the report do not hide the requests of
// others (queued_request_cost 1024 each).
func TestReportLoadCountsLeasesAtReport(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	a := []affinity.Backend{affinity.MustBackend("a", "", 1)}
	l1, err := acquire(s, "s1", "", a, 100)
	require.NoError(t, err)
	require.NoError(t, s.ReportLoad("a", affinity.BackendLoad{Running: 1})) // the scrape sees l1
	assert.Equal(t, int64(100), s.LoadView("a"), "the reported request is the lease itself")
	l1.Done(affinity.DoneInfo{})
	assert.Zero(t, s.LoadView("a"), "no phantom once it has ended")

	l1, err = acquire(s, "s2", "", a, 100) // a new session: charged its whole cost
	require.NoError(t, err)
	require.NoError(t, s.ReportLoad("a", affinity.BackendLoad{Waiting: 2, Running: 1})) // l1 and two others
	assert.Equal(t, int64(100+2*1024), s.LoadView("a"))
	var more [3]affinity.Lease
	for i := range more {
		require.NoError(t, s.Acquire(fmt.Sprint("t", i), "", a, 100, &more[i]))
	}
	assert.Equal(t, int64(4*100+2*1024), s.LoadView("a"), "leases opened since the report do not hide the two others")
	l1.Done(affinity.DoneInfo{})
	for i := range more {
		more[i].Done(affinity.DoneInfo{})
	}
	assert.Equal(t, int64(2*1024), s.LoadView("a"), "the two others until the next report")
	assert.Equal(t, int64(3), s.Load("a").Reported, "Reported is the report as given")
	require.NoError(t, s.ReportLoad("a", affinity.BackendLoad{}))
	assert.Zero(t, s.LoadView("a"))
}

// TestLeaseRace: many goroutines acquire (some through LeaseBackend) and release leases (Done from other goroutines,
// twice, some by two goroutines at once; a Lease filled again after its Done; all
// concurrently with OnBackendDown/Up and load reports); afterwards every backend's
// outstanding load is 0. Run with -race.
func TestLeaseRace(t *testing.T) {
	s, _ := newSched(t, loadCfg(1.25, 1))
	bs := backendsN(8)
	leases := make(chan *affinity.Lease, 64)
	var ok atomic.Uint64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var own affinity.Lease // filled again after each of its Done calls
			for i := range 2000 {
				l := &own
				if i%2 == 0 { // handed to the releasers
					l = new(affinity.Lease)
				}
				var err error
				if i%8 == 3 { // a request routed by the caller (a retry)
					err = s.LeaseBackend(bs[rng.IntN(len(bs))], int64(rng.IntN(3000)), l)
				} else {
					err = s.Acquire(fmt.Sprintf("s%d", rng.IntN(500)), "", bs, int64(rng.IntN(3000)), l)
				}
				if errors.Is(err, affinity.ErrNoEligibleBackend) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				if i%8 != 3 {
					ok.Add(1) // LeaseBackend counts nothing
				}
				if i%2 == 0 {
					leases <- l
					if i%4 == 0 { // both releasers may end it at once
						leases <- l
					}
				} else {
					l.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: int64(rng.IntN(1000))})
				}
			}
		}()
	}
	var rel sync.WaitGroup
	for range 2 {
		rel.Add(1)
		go func() {
			defer rel.Done()
			for l := range leases {
				l.Done(affinity.DoneInfo{})
				l.Done(affinity.DoneInfo{}) // twice
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 200 {
			id := bs[i%len(bs)].ID()
			s.OnBackendDown(id)
			_ = s.ReportLoad(id, affinity.BackendLoad{Waiting: int64(i % 7)})
			s.OnBackendUp(id)
		}
	}()
	wg.Wait()
	close(leases)
	rel.Wait()
	for _, b := range bs {
		assert.Equal(t, int64(0), s.Load(b.ID()).Requests, b.ID())
		assert.Equal(t, int64(0), s.Load(b.ID()).Cost, b.ID())
	}
	st := s.Stats()
	assert.Equal(t, ok.Load(), st.Hits+st.Misses, "every successful Acquire counted once")
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[affinity.Outcome]string{affinity.OutcomeHit: "hit", affinity.OutcomeMiss: "miss",
		affinity.OutcomeRebind: "rebind", affinity.OutcomeSpill: "spill", 0: "Outcome(0)"} {
		assert.Equal(t, want, o.String())
	}
}

// TestAcquireIdleEqualsHRW: with load awareness on but no load, Acquire places every new
// session on SelectBackend's HRW winner — at 8 and at 200 candidates (the pooled-scratch
// path), with mixed weights and a duplicate ID.
func TestAcquireIdleEqualsHRW(t *testing.T) {
	for _, n := range []int{8, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			bs := make([]affinity.Backend, n)
			for i := range bs {
				bs[i] = affinity.MustBackend(fmt.Sprintf("b%03d", i), "", float64(1+i%3))
			}
			bs = append(bs, bs[n/2]) // a duplicate collapses to its first occurrence
			ref, _ := newSched(t, affinity.Config{})
			s, _ := newSched(t, loadCfg(1.1, 1))
			for i := range 500 {
				id := fmt.Sprintf("s%d", i)
				want, _, err := ref.SelectBackend(id, "", bs)
				require.NoError(t, err)
				l, err := acquire(s, id, "", bs, 100)
				require.NoError(t, err)
				require.Equal(t, want.ID(), l.Backend.ID(), id)
				l.Done(affinity.DoneInfo{})
			}
		})
	}
}

// TestLoadPlacementOrderIndependent: for a fixed load view, placement and spill do not
// depend on the order of the candidates (rule 8 holds with load awareness on).
func TestLoadPlacementOrderIndependent(t *testing.T) {
	bs := backendsN(9)
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 50 {
		var rs [2]*affinity.Scheduler
		for k := range rs {
			rs[k], _ = newSched(t, loadCfg(1.1, 0.5))
		}
		// The same load on both: one open lease of random cost per backend, some idle.
		for i, b := range bs {
			if rng.IntN(3) == 0 {
				continue
			}
			cost := int64(1 + rng.IntN(20000))
			for k := range rs {
				_, err := acquire(rs[k], fmt.Sprintf("bg%d", i), "", []affinity.Backend{b}, cost)
				require.NoError(t, err)
			}
		}
		for s := range 40 {
			id := fmt.Sprintf("r%d-s%d", round, s)
			perm := append([]affinity.Backend(nil), bs...)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			a, err := acquire(rs[0], id, "", bs, 3000)
			require.NoError(t, err)
			b, err := acquire(rs[1], id, "", perm, 3000)
			require.NoError(t, err)
			require.Equal(t, a.Backend.ID(), b.Backend.ID(), "round %d session %d", round, s)
			require.Equal(t, a.Outcome, b.Outcome)
			a.Done(affinity.DoneInfo{})
			b.Done(affinity.DoneInfo{})
		}
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
// usage reported to Done.
func TestLeaseHitZeroAllocs(t *testing.T) {
	for _, n := range []int{8, 64} {
		for _, tc := range []struct {
			name string
			cfg  affinity.Config
			info affinity.DoneInfo
		}{
			{"off", affinity.Config{}, affinity.DoneInfo{}},
			{"off/usage", affinity.Config{}, affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 900}},
			{"on", loadCfg(1.25, 1), affinity.DoneInfo{}},
			{"on/usage", loadCfg(1.25, 1), affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 900}},
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
				l.Done(affinity.DoneInfo{PromptTokens: 500, CachedPromptTokens: 400})
			}
			open.Done(affinity.DoneInfo{PromptTokens: 500})
			assert.Equal(t, affinity.LoadSnapshot{}, s.Load("b"), "every lease released")
			st := s.Stats()
			assert.Zero(t, st.Hits+st.Misses+st.Broken.Total(), "nothing counted")
			assert.Zero(t, s.Len(), "nothing bound")
			assert.Zero(t, s.Reuse("").PromptTokens, "reuse is for hits on a binding")
			var l affinity.Lease
			allocs := testing.AllocsPerRun(100, func() {
				_ = s.LeaseBackend(b, 5, &l)
				l.Done(affinity.DoneInfo{PromptTokens: 10})
			})
			assert.Zero(t, allocs, "LeaseBackend+Done into a reused Lease")
		})
	}
}
