package affinity_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/metrics"
)

// bindParentAwayFromChild binds "parent" in tier to a backend that is not the child's
// HRW winner, so a PlacedParent result cannot be a coincidence. It returns that backend.
func bindParentAwayFromChild(t *testing.T, f *fixture, child, tier string, cands []affinity.Backend) string {
	t.Helper()
	w := hrwWinner(child, cands)
	for _, b := range cands {
		if b.ID() != w {
			require.NoError(t, f.s.Table().Bind("parent", tier, b.ID()))
			return b.ID()
		}
	}
	t.Fatal("need two candidates")
	return ""
}

func TestSelectBackendWithParent(t *testing.T) {
	const tier = "gold"
	tests := []struct {
		name  string
		setup func(f *fixture, bs []affinity.Backend, parentID string) []affinity.Backend // returns the candidates
		// parent is the parent ID passed (default "parent").
		parent string
		tier   string
		want   affinity.Placement
	}{
		{name: "parent bound: child starts on the parent's backend", want: affinity.PlacedParent},
		{name: "no parent ID", parent: "-", want: affinity.PlacedHRW},
		{name: "unknown parent", parent: "nobody", want: affinity.PlacedHRW},
		{name: "parent bound in another tier", tier: "silver", want: affinity.PlacedHRW},
		{name: "parent expired", want: affinity.PlacedHRW,
			setup: func(f *fixture, bs []affinity.Backend, _ string) []affinity.Backend {
				f.clk.Advance(30 * time.Minute) // default TTL 1800 s: now >= lastUse + TTL
				return bs
			}},
		{name: "parent's backend not a candidate", want: affinity.PlacedHRW,
			setup: func(_ *fixture, bs []affinity.Backend, p string) []affinity.Backend { return without(bs, p) }},
		{name: "parent's backend down", want: affinity.PlacedHRW,
			setup: func(f *fixture, bs []affinity.Backend, p string) []affinity.Backend {
				f.s.Health().MarkDown(p) // directly in the set: the parent's binding stays
				return bs
			}},
		{name: "parent's backend draining, others healthy", want: affinity.PlacedHRW,
			setup: func(f *fixture, bs []affinity.Backend, p string) []affinity.Backend {
				f.s.OnBackendDraining(p)
				return bs
			}},
		{name: "everything draining: the parent's backend is eligible", want: affinity.PlacedParent,
			setup: func(f *fixture, bs []affinity.Backend, _ string) []affinity.Backend {
				for _, b := range bs {
					f.s.OnBackendDraining(b.ID())
				}
				return bs
			}},
		{name: "parent ID too long is ignored, not an error", parent: strings.Repeat("p", 300), want: affinity.PlacedHRW},
		{name: "parent ID equal to the session ID", parent: "child", want: affinity.PlacedHRW},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, affinity.Config{})
			bs := backends(t, 4)
			bindTier := tier
			if tt.tier != "" {
				bindTier = tt.tier
			}
			pb := bindParentAwayFromChild(t, f, "child", bindTier, bs)
			cands := bs
			if tt.setup != nil {
				cands = tt.setup(f, bs, pb)
			}
			parent := "parent"
			switch tt.parent {
			case "-":
				parent = ""
			case "":
			default:
				parent = tt.parent
			}
			b, p, err := f.s.SelectBackendWithParent("child", parent, tier, cands)
			require.NoError(t, err)
			assert.Equal(t, tt.want, p, "placement")
			if tt.want == affinity.PlacedParent {
				assert.Equal(t, pb, b.ID())
			} else {
				assert.Equal(t, hrwWinnerAmong(t, f, "child", tier, cands), b.ID(), "falls back to SelectBackend's choice")
			}
			st := f.s.Stats()
			assert.Equal(t, uint64(1), st.Misses, "a parent placement is a miss")
			assert.Equal(t, uint64(0), st.Hits)
			wantPP := uint64(0)
			if tt.want == affinity.PlacedParent {
				wantPP = 1
			}
			assert.Equal(t, wantPP, st.ParentPlaced)
			assert.Equal(t, int(wantPP), f.rec.Count(metrics.KindParentPlaced, tier))
			assert.Equal(t, 1, f.rec.Misses(tier))

			// Afterwards the child has its own binding: the next turn is a hit there.
			got, ok := f.s.Lookup("child", tier)
			require.True(t, ok)
			assert.Equal(t, b.ID(), got)
			b2, p2, err := f.s.SelectBackendWithParent("child", parent, tier, cands)
			require.NoError(t, err)
			assert.Equal(t, affinity.PlacedHit, p2)
			assert.Equal(t, b.ID(), b2.ID())
		})
	}
}

// hrwWinnerAmong is the HRW choice under f's current health (a scratch Scheduler sharing
// the health set).
func hrwWinnerAmong(t *testing.T, f *fixture, session, tier string, cands []affinity.Backend) string {
	t.Helper()
	s, err := affinity.New(affinity.Config{}, affinity.WithHealth(f.s.Health()))
	require.NoError(t, err)
	b, _, err := s.SelectBackend(session, tier, cands)
	require.NoError(t, err)
	return b.ID()
}

// The hint never changes a hit, and the child's binding is its own afterwards.
func TestParentHintNeverMovesABinding(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 4)
	own, hit := f.sel(t, "child", "", bs)
	require.False(t, hit)
	for _, b := range bs {
		if b.ID() != own {
			require.NoError(t, f.s.Table().Bind("parent", "", b.ID()))
			break
		}
	}
	b, p, err := f.s.SelectBackendWithParent("child", "parent", "", bs)
	require.NoError(t, err)
	assert.Equal(t, affinity.PlacedHit, p)
	assert.Equal(t, own, b.ID())

	// The parent's backend goes down later: the child keeps its own binding.
	pb, _ := f.s.Lookup("parent", "")
	f.s.OnBackendDown(pb)
	b, p, err = f.s.SelectBackendWithParent("child", "parent", "", bs)
	require.NoError(t, err)
	assert.Equal(t, affinity.PlacedHit, p)
	assert.Equal(t, own, b.ID())
}

// Reading the parent's binding never extends its TTL.
func TestParentHintDoesNotTouchParent(t *testing.T) {
	f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(100)})
	bs := backends(t, 3)
	_, _ = f.sel(t, "parent", "", bs)
	f.clk.Advance(60 * time.Second)
	_, p, err := f.s.SelectBackendWithParent("child", "parent", "", bs)
	require.NoError(t, err)
	require.Equal(t, affinity.PlacedParent, p)
	f.clk.Advance(40 * time.Second) // 100 s after the parent's last own turn
	_, ok := f.s.Lookup("parent", "")
	assert.False(t, ok, "the child's placement did not slide the parent's TTL")
	_, ok = f.s.Lookup("child", "")
	assert.True(t, ok)
}

// Errors are SelectBackend's; nothing is stored or counted.
func TestSelectBackendWithParentErrors(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 2)
	_, _ = f.sel(t, "parent", "", bs)
	_, p, err := f.s.SelectBackendWithParent("", "parent", "", bs)
	assert.ErrorIs(t, err, affinity.ErrEmptySessionID)
	assert.Equal(t, affinity.PlacedHRW, p)
	_, _, err = f.s.SelectBackendWithParent("child", "parent", "", nil)
	assert.ErrorIs(t, err, affinity.ErrNoCandidates)
	_, _, err = f.s.SelectBackendWithParent("child", "parent", "", append(append([]affinity.Backend{}, bs...), affinity.Backend{}))
	assert.ErrorIs(t, err, affinity.ErrInvalidBackend, "a zero Backend is SelectBackend's error, hint or not")
	for _, b := range bs {
		f.s.OnBackendDown(b.ID())
	}
	_, _, err = f.s.SelectBackendWithParent("child", "parent", "", bs)
	assert.ErrorIs(t, err, affinity.ErrNoEligibleBackend)
	assert.Equal(t, uint64(1), f.s.Stats().Misses, "only the parent's own first turn")
	assert.Equal(t, uint64(0), f.s.Stats().ParentPlaced)
}

// With affinity off (TTL 0) nothing is bound, so the hint never applies.
func TestParentHintAffinityOff(t *testing.T) {
	f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(0)})
	bs := backends(t, 4)
	_, p, err := f.s.SelectBackendWithParent("child", "parent", "", bs)
	require.NoError(t, err)
	assert.Equal(t, affinity.PlacedHRW, p)
}

// Concurrent first turns of one subagent: one binding, one miss, one parent placement,
// every caller gets the parent's backend.
func TestParentHintConcurrentFirstTurns(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 8)
	pb := bindParentAwayFromChild(t, f, "child", "", bs)
	const n = 16
	var wg sync.WaitGroup
	got := make([]string, n)
	placed := make([]affinity.Placement, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, p, err := f.s.SelectBackendWithParent("child", "parent", "", bs)
			assert.NoError(t, err)
			got[i], placed[i] = b.ID(), p
		}()
	}
	wg.Wait()
	parents := 0
	for i := range n {
		assert.Equal(t, pb, got[i])
		if placed[i] == affinity.PlacedParent {
			parents++
		} else {
			assert.Equal(t, affinity.PlacedHit, placed[i])
		}
	}
	assert.Equal(t, 1, parents)
	st := f.s.Stats()
	assert.Equal(t, uint64(1), st.Misses)
	assert.Equal(t, uint64(1), st.ParentPlaced)
	assert.Equal(t, uint64(n-1), st.Hits)
}

// With an empty parent the result equals SelectBackend's, call for call.
func TestSelectBackendWithParentEmptyEqualsSelectBackend(t *testing.T) {
	a := newFixture(t, affinity.Config{})
	b := newFixture(t, affinity.Config{})
	bs := backends(t, 5)
	for i, sid := range []string{"s1", "s2", "s1", "s3", "s2", "s1"} {
		x, hit, err := a.s.SelectBackend(sid, "", bs)
		require.NoError(t, err)
		y, p, err := b.s.SelectBackendWithParent(sid, "", "", bs)
		require.NoError(t, err)
		assert.Equal(t, x.ID(), y.ID(), "call %d", i)
		assert.Equal(t, hit, p.Hit(), "call %d", i)
	}
	assert.Equal(t, a.s.Stats(), b.s.Stats())
}

func TestPlacementString(t *testing.T) {
	for p, want := range map[affinity.Placement]string{
		affinity.PlacedHRW: "hrw", affinity.PlacedHit: "hit", affinity.PlacedParent: "parent", 9: "Placement(9)",
	} {
		assert.Equal(t, want, p.String())
	}
	_ = health.Healthy
}

// AcquireWithParent: a first turn is leased on the parent's backend (a miss, counted as
// parent-placed); Done releases the load; later turns are Acquire's hits.
func TestAcquireWithParent(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 4)
	pb := bindParentAwayFromChild(t, f, "child", "", bs)
	l, p, err := acquireWithParent(f.s, "child", "parent", "", bs, 100)
	require.NoError(t, err)
	assert.Equal(t, affinity.PlacedParent, p)
	assert.Equal(t, pb, l.Backend.ID())
	assert.False(t, l.AffinityHit)
	assert.Equal(t, affinity.OutcomeMiss, l.Outcome)
	assert.Equal(t, int64(1), f.s.Load(pb).Requests, "the lease is charged to the parent's backend")
	l.Done(affinity.DoneInfo{})
	assert.Equal(t, int64(0), f.s.Load(pb).Requests, "Done releases it")

	l, p, err = acquireWithParent(f.s, "child", "parent", "", bs, 100)
	require.NoError(t, err)
	assert.Equal(t, affinity.PlacedHit, p)
	assert.True(t, l.AffinityHit)
	l.Done(affinity.DoneInfo{})
	st := f.s.Stats()
	assert.Equal(t, uint64(1), st.ParentPlaced)
	assert.Equal(t, uint64(1), st.Hits)

	_, _, err = acquireWithParent(f.s, "child", "parent", "", bs, -1)
	assert.ErrorIs(t, err, affinity.ErrInvalidCost)
}
