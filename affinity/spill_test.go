package affinity_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
)

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
		l.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
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
		l.Done(affinity.DoneInfo{PromptTokens: 1000, CachedPromptTokens: 0, CacheReported: true})
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
