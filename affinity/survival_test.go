package affinity_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// TestDrainSurvivalGuard (rule 14d): past its backend's cache retention a binding's guard
// reprefill is its prefix x the survival rate hits idle as long have shown on that
// backend. With no such hit yet the prefix is protected in full (the binding stays on its
// overloaded backend); once hits idle as long found their prefixes evicted, the guard
// lets it spill.
func TestDrainSurvivalGuard(t *testing.T) {
	for _, tc := range []struct {
		name     string
		teachers int // hits idle as long as the session that found their prefix evicted
		spill    bool
	}{{"no survival learned", 0, false}, {"prefixes idle as long were evicted", 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// No retention guard: only the learned survival rate changes the guard.
			s, clk, bs, w, turn := survivalFixture(t)
			turn("r", 1000, 0)
			for i := range tc.teachers {
				turn(fmt.Sprintf("t%d", i), 1000, 0)
			}
			clk.Advance(10 * time.Second)
			turn("r", 1200, 0) // the first eviction: a retention of 10 s
			require.Equal(t, 10*time.Second, s.Drain(w.ID()).CacheRetention)
			clk.Advance(12 * time.Second) // the session and the teachers idle 22 s: 2.2 retentions
			for i := range tc.teachers {
				turn(fmt.Sprintf("t%d", i), 1200, 0)
			}
			require.Equal(t, 10*time.Second, s.Drain(w.ID()).CacheRetention, "evictions past the retention leave it")

			// w's queue: 15 x 1024 tokens. The guard needs 15360 > 5 x reprefill, with a
			// reprefill of 4032 x the survival rate (1, or 0.95^10 = 0.60 after the teachers).
			require.NoError(t, s.ReportLoad(w.ID(), affinity.BackendLoad{Waiting: 15}))
			l, err := acquire(s, "s", "", bs, 5000)
			require.NoError(t, err)
			defer l.Done(affinity.DoneInfo{})
			if tc.spill {
				assert.Equal(t, affinity.OutcomeSpill, l.Outcome)
				assert.NotEqual(t, w.ID(), l.Backend.ID())
			} else {
				assert.Equal(t, affinity.OutcomeHit, l.Outcome)
				assert.Equal(t, w.ID(), l.Backend.ID())
			}
		})
	}
}

// TestDrainSurvivalBelowRetention (rule 14d): below the retention the prefix is expected
// cached and fully protected, whatever hits idle as long reported.
func TestDrainSurvivalBelowRetention(t *testing.T) {
	s, clk, bs, w, turn := survivalFixture(t)
	turn("r", 1000, 0)
	clk.Advance(20 * time.Second)
	turn("r", 1200, 0) // retention 20 s
	for i := range 20 {
		turn(fmt.Sprintf("t%d", i), 1000, 0)
	}
	clk.Advance(5 * time.Second)
	for i := range 20 { // idle 5 s, a quarter of the retention: evicted all the same
		turn(fmt.Sprintf("t%d", i), 1200, 0)
	}
	require.Less(t, s.Drain(w.ID()).CacheRetention, 20*time.Second, "evictions below the retention lower it")
	require.Greater(t, s.Drain(w.ID()).CacheRetention, 5*time.Second+time.Second)
	// A session bound to w (its HRW winner) and idle 5 s, about half the retention.
	ref, _ := newSched(t, affinity.Config{})
	u := ""
	for i := 0; u == ""; i++ {
		if b, _, _ := ref.SelectBackend(fmt.Sprintf("u%d", i), "", bs); b.ID() == w.ID() {
			u = fmt.Sprintf("u%d", i)
		}
	}
	l, err := acquire(s, u, "", bs, 4000)
	require.NoError(t, err)
	require.Equal(t, w.ID(), l.Backend.ID())
	l.Done(affinity.DoneInfo{PromptTokens: 4000, CacheReported: true})
	clk.Advance(5 * time.Second)
	require.NoError(t, s.ReportLoad(w.ID(), affinity.BackendLoad{Waiting: 15}))
	l, err = acquire(s, u, "", bs, 5000)
	require.NoError(t, err)
	defer l.Done(affinity.DoneInfo{})
	assert.Equal(t, affinity.OutcomeHit, l.Outcome, "15360 <= 5 x 4032: the whole prefix is protected")
}

// TestSpillColdBindingReplaced (rule 18): a binding whose prefix is gone (its last hit
// reported no cached tokens) is placed as a new session would be when its backend is
// busy: it moves to its HRW winner, up its ranking, when that is less loaded, and stays
// when it is not.
func TestSpillColdBindingReplaced(t *testing.T) {
	bs := backendsN(2)
	ref, _ := newSched(t, affinity.Config{})
	sid := ""
	var top, other affinity.Backend
	for i := 0; sid == ""; i++ {
		if b, _, _ := ref.SelectBackend(fmt.Sprintf("s%d", i), "", bs); b.ID() == "b00" {
			sid, top, other = fmt.Sprintf("s%d", i), bs[0], bs[1]
		}
	}
	s, _ := newSched(t, loadCfg(1.25, 5))
	report := func(a, b int64) {
		t.Helper()
		require.NoError(t, s.ReportLoad(top.ID(), affinity.BackendLoad{Waiting: a}))
		require.NoError(t, s.ReportLoad(other.ID(), affinity.BackendLoad{Waiting: b}))
	}
	turn := func(cost, cached int64) *affinity.Lease {
		t.Helper()
		l, err := acquire(s, sid, "", bs, cost)
		require.NoError(t, err)
		l.Done(affinity.DoneInfo{PromptTokens: cost, CachedPromptTokens: cached, CacheReported: true})
		return l
	}
	report(20, 0) // the HRW winner busy: placed on the other backend
	l := turn(1000, 0)
	require.Equal(t, affinity.OutcomeMiss, l.Outcome)
	require.Equal(t, other.ID(), l.Backend.ID())
	report(0, 0)
	l = turn(1500, 0) // a hit that found its prefix evicted: the binding is cold
	require.Equal(t, affinity.OutcomeHit, l.Outcome)

	report(30, 20) // the HRW winner is under the bound but busier: stay
	l = turn(2000, 0)
	assert.Equal(t, affinity.OutcomeHit, l.Outcome)
	assert.Equal(t, other.ID(), l.Backend.ID())

	report(0, 20) // the HRW winner idle: the cold binding moves up to it
	l = turn(2000, 0)
	assert.Equal(t, affinity.OutcomeSpill, l.Outcome)
	assert.False(t, l.AffinityHit)
	assert.Equal(t, top.ID(), l.Backend.ID())
	assert.Equal(t, uint64(1), s.Stats().Broken.Overloaded)

	// Warm again (the move's own turn is not a hit: no cold flag) and the other backend
	// idle: the warm binding stays under the bound on its HRW winner.
	report(0, 0)
	l = turn(2000, 1900)
	assert.Equal(t, affinity.OutcomeHit, l.Outcome)
	assert.Equal(t, top.ID(), l.Backend.ID())
}

// TestSpillColdDeterminism: two Schedulers fed the same calls, with hits that report lost
// prefixes (cold bindings placed anew, rule 18) and the drain model's survival rates
// (rule 14d), decide alike.
func TestSpillColdDeterminism(t *testing.T) {
	for _, cfg := range []affinity.Config{loadCfg(1.1, 3), drainCfg(1.1, 3, 2000, 2.5)} {
		runTwins(t, cfg, twinScript{seed: 9, steps: 4000, sessions: 200, maxAdvanceMS: 800, doneOneIn: 2, cachedSteps: 3, cachedUnit: 1000})
	}
}

// survivalFixture: a drain-model Scheduler (balance 1.0, spill weight 5, 1000 tokens/s,
// no retention guard) over 4 backends where session "s" is bound to w with a 4000-token
// prompt, and turn, which leases a session on w alone and reports its usage.
func survivalFixture(t *testing.T) (*affinity.Scheduler, *affinitytest.Clock, []affinity.Backend, affinity.Backend, func(session string, cost, cached int64)) {
	t.Helper()
	bs := backendsN(4)
	s, clk := newSched(t, drainCfg(1.0, 5, 1000, 0))
	first, err := acquire(s, "s", "", bs, 4000)
	require.NoError(t, err)
	w := first.Backend
	first.Done(affinity.DoneInfo{PromptTokens: 4000, CacheReported: true})
	only := []affinity.Backend{w}
	turn := func(session string, cost, cached int64) {
		t.Helper()
		l, err := acquire(s, session, "", only, cost)
		require.NoError(t, err)
		l.Done(affinity.DoneInfo{PromptTokens: cost, CachedPromptTokens: cached, CacheReported: true})
	}
	return s, clk, bs, w, turn
}
