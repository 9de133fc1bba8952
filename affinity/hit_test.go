package affinity_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// TestHitFindsFirstCopy drives the hit path's candidate check (the remembered position of
// each backend among the caller's candidates, confirmed and then checked in one pass)
// with candidate lists that reorder, duplicate (same ID, another address: a distinct
// string, and the very same Backend value) and contain zero Backends, and checks each call
// against the contract: a zero Backend anywhere is ErrInvalidBackend; otherwise a session
// whose bound backend is a candidate hits and gets the first candidate with that ID.
func TestHitFindsFirstCopy(t *testing.T) {
	bs := backends(t, 6)
	var copies []affinity.Backend // bs[i] under another address, its ID a distinct string
	for i := range bs {
		copies = append(copies, affinity.MustBackend(string([]byte(bs[i].ID())), fmt.Sprintf("copy-%d", i), 1))
	}
	f := newFixture(t, affinity.Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	for call := range 20_000 {
		session := fmt.Sprintf("s%d", rng.IntN(40))
		var cands []affinity.Backend
		for _, i := range rng.Perm(len(bs))[:2+rng.IntN(len(bs)-1)] {
			cands = append(cands, bs[i])
		}
		for range rng.IntN(3) { // duplicates: before or after the original
			b := copies[rng.IntN(len(copies))]
			if rng.IntN(2) == 0 {
				b = bs[rng.IntN(len(bs))]
			}
			j := rng.IntN(len(cands) + 1)
			cands = append(cands[:j], append([]affinity.Backend{b}, cands[j:]...)...)
		}
		zero := rng.IntN(20) == 0
		if zero {
			j := rng.IntN(len(cands) + 1)
			cands = append(cands[:j], append([]affinity.Backend{{}}, cands[j:]...)...)
		}
		bound, wasBound := f.s.Lookup(session, "")
		got, hit, err := f.s.SelectBackend(session, "", cands)
		if zero {
			require.True(t, errors.Is(err, affinity.ErrInvalidBackend), "call %d: err %v", call, err)
			continue
		}
		require.NoError(t, err, "call %d", call)
		first := -1
		for j, c := range cands {
			if wasBound && c.ID() == bound {
				first = j
				break
			}
		}
		require.Equal(t, first >= 0, hit, "call %d: hit", call)
		if hit {
			require.Equal(t, cands[first], got, "call %d: the first copy of the bound backend", call)
		}
	}
}

// TestHitSeesHealthChanges checks that the hit path's cached health state (kept per
// backend while some backend is not Healthy) follows every change of the health set at
// once: the next call after a change sees it.
func TestHitSeesHealthChanges(t *testing.T) {
	bs := backends(t, 4)
	f := newFixture(t, affinity.Config{})
	hs := f.s.Health()
	hs.Drain("elsewhere") // not Healthy somewhere: the cached path
	bound, hit := f.sel(t, "s", "", bs)
	require.False(t, hit)
	steps := []struct {
		to      health.State
		wantHit bool
	}{
		{health.Healthy, true},
		{health.Draining, true}, // a drained backend keeps its bindings
		{health.Down, false},    // broken (unhealthy): rebound elsewhere
	}
	for i, st := range steps {
		_, _ = hs.Set(bound, st.to)
		got, hit := f.sel(t, "s", "", bs)
		require.Equal(t, st.wantHit, hit, "step %d (%v)", i, st.to)
		if hit {
			require.Equal(t, bound, got, "step %d", i)
			continue
		}
		require.NotEqual(t, bound, got, "step %d", i)
		_, _ = hs.Set(bound, health.Healthy)
		bound = got
	}
	require.Equal(t, uint64(1), f.s.Stats().Broken.Unhealthy)
}
