package affinity_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Rule 1: bindings are keyed by (tier, sessionID).
func TestRule1PerTierBindings(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 8)
	gold := bs[:4]
	silver := bs[4:]
	g, hit := f.sel(t, "s1", "gold", gold)
	assert.False(t, hit)
	s, hit := f.sel(t, "s1", "silver", silver)
	assert.False(t, hit, "same session, other tier: its own first turn")
	assert.Equal(t, 2, f.s.Len())

	got, ok := f.s.Lookup("s1", "gold")
	assert.True(t, ok)
	assert.Equal(t, g, got)
	got, ok = f.s.Lookup("s1", "silver")
	assert.True(t, ok)
	assert.Equal(t, s, got)
	_, ok = f.s.Lookup("s1", "")
	assert.False(t, ok, "the default tier has no binding")

	// Forgetting one tier leaves the other.
	assert.True(t, f.s.Forget("s1", "gold"))
	assert.False(t, f.s.Forget("s1", "gold"))
	_, hit = f.sel(t, "s1", "silver", silver)
	assert.True(t, hit)

	// Tier and session are not confused by concatenation: ("ab","c") vs ("a","bc").
	_, hit = f.sel(t, "c", "ab", bs)
	assert.False(t, hit)
	_, hit = f.sel(t, "bc", "a", bs)
	assert.False(t, hit)
	assert.Equal(t, 1, f.rec.Hits("silver"))
	assert.Equal(t, 1, f.rec.Misses("gold"))
	assert.Equal(t, 1, f.rec.Misses("ab"))
}

// Rule 2: hits with sliding TTL, returning the caller's current candidate value.
func TestRule2HitSlidingTTL(t *testing.T) {
	f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(60)})
	bs := backends(t, 8)
	id, hit := f.sel(t, "sess", "", bs)
	require.False(t, hit)
	for turn := range 5 {
		f.clk.Advance(59 * time.Second) // 5 x 59 s > 60 s: only sliding keeps it alive
		got, hit := f.sel(t, "sess", "", bs)
		assert.True(t, hit, "turn %d", turn+2)
		assert.Equal(t, id, got)
	}
	// The returned value is the caller's current one (new address, same ID).
	cur := slices.Clone(bs)
	for i, b := range cur {
		if b.ID() == id {
			cur[i] = affinity.MustBackend(id, "http://moved:9000", 3)
		}
	}
	b, hit, err := f.s.SelectBackend("sess", "", cur)
	require.NoError(t, err)
	assert.True(t, hit)
	assert.Equal(t, "http://moved:9000", b.Addr())
	assert.Equal(t, 3.0, b.Weight())

	st := f.s.Stats()
	assert.Equal(t, uint64(6), st.Hits)
	assert.Equal(t, uint64(1), st.Misses)
}

// Rule 3: a miss returns the HRW winner over the eligible candidates and stores it.
func TestRule3MissIsHRWWinner(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	for _, n := range []int{1, 2, 8, 64} {
		bs := backends(t, n)
		for i := range 200 {
			s := fmt.Sprintf("n%d-s%d", n, i)
			id, hit := f.sel(t, s, "", bs)
			require.False(t, hit)
			require.Equal(t, hrwWinner(s, bs), id, s)
			got, ok := f.s.Lookup(s, "")
			require.True(t, ok)
			require.Equal(t, id, got)
		}
	}
	assert.Equal(t, 800, f.rec.Misses(""))
	assert.Equal(t, 0, f.rec.Hits(""))
}

// Rule 4: broken bindings, one subtest per reason.
func TestRule4Broken(t *testing.T) {
	bs := backends(t, 8)
	cases := []struct {
		name   string
		reason metrics.Reason
		breakF func(f *fixture, id string) []affinity.Backend // returns the candidates to use next
		field  func(affinity.BrokenStats) uint64
	}{
		{"down", metrics.ReasonDown, func(f *fixture, id string) []affinity.Backend {
			assert.Equal(t, 1, f.s.OnBackendDown(id))
			return bs
		}, func(b affinity.BrokenStats) uint64 { return b.Down }},
		{"unhealthy", metrics.ReasonUnhealthy, func(f *fixture, id string) []affinity.Backend {
			f.s.Health().MarkDown(id) // the checker marked it, nobody called OnBackendDown
			return bs
		}, func(b affinity.BrokenStats) uint64 { return b.Unhealthy }},
		{"not_candidate", metrics.ReasonNotCandidate, func(f *fixture, id string) []affinity.Backend {
			return without(bs, id)
		}, func(b affinity.BrokenStats) uint64 { return b.NotCandidate }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, affinity.Config{})
			old, _ := f.sel(t, "sess", "gold", bs)
			next := tc.breakF(f, old)
			want := hrwWinner("sess", without(bs, old))

			got, hit := f.sel(t, "sess", "gold", next)
			assert.False(t, hit, "a broken binding proceeds as a miss")
			assert.Equal(t, want, got, "rebinds to the HRW winner of the rest")
			assert.Equal(t, uint64(1), tc.field(f.s.Stats().Broken))
			assert.Equal(t, uint64(1), f.s.Stats().Broken.Total(), "counted once, with one reason")
			assert.Equal(t, 1, f.rec.CountBroken("gold", tc.reason))

			// The old backend returns: no failback.
			f.s.OnBackendUp(old)
			for range 3 {
				f.clk.Advance(time.Minute)
				got2, hit := f.sel(t, "sess", "gold", bs)
				assert.True(t, hit)
				assert.Equal(t, want, got2)
			}
			assert.Equal(t, uint64(1), f.s.Stats().Broken.Total(), "never counted twice")
			assert.Equal(t, 2, f.rec.Misses("gold"))
		})
	}
}

// Rule 4: an expired binding whose backend is gone is a plain miss, not broken.
func TestRule4ExpiredIsNotBroken(t *testing.T) {
	f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(10)})
	bs := backends(t, 4)
	old, _ := f.sel(t, "sess", "", bs)
	f.clk.Advance(10 * time.Second)
	_, hit := f.sel(t, "sess", "", without(bs, old))
	assert.False(t, hit)
	st := f.s.Stats()
	assert.Zero(t, st.Broken.Total())
	assert.Equal(t, uint64(1), st.Expired)
	assert.Equal(t, 0, f.s.OnBackendDown(old), "the rebound session is not on old")
}

// Rule 4: OnBackendDown deletes exactly the bindings to id, counts them once, is
// idempotent, and marks unknown IDs Down.
func TestRule4OnBackendDown(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 4)
	per := map[string]int{}
	for i := range 1000 {
		id, _ := f.sel(t, fmt.Sprintf("s%d", i), []string{"", "gold"}[i%2], bs)
		per[id]++
	}
	require.Equal(t, 1000, f.s.Len())
	victim := bs[1].ID()
	require.Positive(t, per[victim])

	assert.Equal(t, per[victim], f.s.OnBackendDown(victim))
	assert.Equal(t, 1000-per[victim], f.s.Len())
	assert.Equal(t, 0, f.s.OnBackendDown(victim), "idempotent")
	assert.Equal(t, uint64(per[victim]), f.s.Stats().Broken.Down)
	assert.Equal(t, per[victim], f.rec.CountBroken("", metrics.ReasonDown)+f.rec.CountBroken("gold", metrics.ReasonDown))
	assert.Equal(t, health.Down, f.s.Health().State(victim))

	// Nobody else moved.
	for i := range 1000 {
		s := fmt.Sprintf("s%d", i)
		if id, ok := f.s.Lookup(s, []string{"", "gold"}[i%2]); ok {
			assert.NotEqual(t, victim, id)
		}
	}
	// Unknown ID: 0 removed, but marked Down so new sessions avoid it.
	assert.Equal(t, 0, f.s.OnBackendDown("nope"))
	assert.Equal(t, health.Down, f.s.Health().State("nope"))
	ghost := affinity.MustBackend("nope", "", 1)
	for i := range 50 {
		id, _ := f.sel(t, fmt.Sprintf("new%d", i), "", []affinity.Backend{ghost, bs[0]})
		assert.Equal(t, bs[0].ID(), id)
	}
	// OnHealthChange maps To states.
	f.s.OnHealthChange(health.Transition{ID: bs[2].ID(), From: health.Healthy, To: health.Down})
	assert.Equal(t, health.Down, f.s.Health().State(bs[2].ID()))
	assert.Equal(t, 0, f.s.OnBackendDown(bs[2].ID()), "OnHealthChange(Down) already dropped them")
	f.s.OnHealthChange(health.Transition{ID: bs[2].ID(), From: health.Down, To: health.Draining})
	assert.Equal(t, health.Draining, f.s.Health().State(bs[2].ID()))
	f.s.OnHealthChange(health.Transition{ID: bs[2].ID(), From: health.Draining, To: health.Healthy})
	assert.Equal(t, health.Healthy, f.s.Health().State(bs[2].ID()))
}

// Draining: keeps its sessions, gets no new ones unless nothing is Healthy.
func TestDraining(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 4)
	d := bs[0].ID()
	kept := sessionOn(t, "k", d, bs)
	_, _ = f.sel(t, kept, "", bs)
	f.s.OnBackendDraining(d)

	got, hit := f.sel(t, kept, "", bs)
	assert.True(t, hit, "draining keeps its sessions")
	assert.Equal(t, d, got)

	fresh := sessionOn(t, "f", d, bs) // HRW would pick d
	got, hit = f.sel(t, fresh, "", bs)
	assert.False(t, hit)
	assert.Equal(t, hrwWinner(fresh, bs[1:]), got, "new sessions avoid draining")

	// Only draining (and down) candidates left: draining is eligible.
	f.s.OnBackendDown(bs[1].ID())
	only := []affinity.Backend{bs[1], bs[0]}
	got, hit = f.sel(t, "lonely", "", only)
	assert.False(t, hit)
	assert.Equal(t, d, got)
	assert.Zero(t, f.s.Stats().Broken.Unhealthy+f.s.Stats().Broken.NotCandidate, "draining broke nothing")
}

// Rule 5: a valid binding is never moved by scale-up, other backends flapping, candidate
// order or the old backend's return.
func TestRule5NoFailback(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	bs := backends(t, 20)
	small := bs[:4]
	bound := map[string]string{}
	for i := range 200 {
		s := fmt.Sprintf("s%d", i)
		bound[s], _ = f.sel(t, s, "", small)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	moved := 0
	for round := range 5 {
		// Scale up, shuffle, flap someone else.
		cands := slices.Clone(bs[:4+3*(round+1)])
		rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		other := bs[4+round].ID()
		f.s.OnBackendDraining(other)
		f.s.OnBackendUp(other)
		for s, want := range bound {
			got, hit := f.sel(t, s, "", cands)
			assert.True(t, hit)
			assert.Equal(t, want, got)
			if hrwWinner(s, cands) != want {
				moved++
			}
		}
	}
	assert.Positive(t, moved, "scale-up changed some HRW winners, and none of them moved")
	assert.Zero(t, f.s.Stats().Broken.Total())
}

// Rule 6: expiry exactly at lastUse + TTL; TTL 0 disables affinity; lookups never extend.
func TestRule6TTL(t *testing.T) {
	t.Run("expiry boundary", func(t *testing.T) {
		f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(100)})
		bs := backends(t, 4)
		_, _ = f.sel(t, "s", "", bs)
		f.clk.Advance(100*time.Second - time.Nanosecond)
		_, hit := f.sel(t, "s", "", bs)
		assert.True(t, hit, "now = lastUse + TTL - 1ns is valid")
		f.clk.Advance(100 * time.Second) // lastUse + TTL exactly
		_, ok := f.s.Lookup("s", "")
		assert.False(t, ok)
		_, hit = f.sel(t, "s", "", bs)
		assert.False(t, hit, "now = lastUse + TTL is expired")
	})
	t.Run("lookup never extends", func(t *testing.T) {
		f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(100)})
		bs := backends(t, 4)
		id, _ := f.sel(t, "s", "", bs)
		for range 9 {
			f.clk.Advance(10 * time.Second)
			got, ok := f.s.Lookup("s", "")
			assert.True(t, ok)
			assert.Equal(t, id, got)
		}
		f.clk.Advance(10 * time.Second)
		_, ok := f.s.Lookup("s", "")
		assert.False(t, ok)
	})
	t.Run("default is 1800s", func(t *testing.T) {
		f := newFixture(t, affinity.Config{})
		bs := backends(t, 4)
		_, _ = f.sel(t, "s", "", bs)
		f.clk.Advance(1799 * time.Second)
		_, hit := f.sel(t, "s", "", bs)
		assert.True(t, hit)
		f.clk.Advance(1800 * time.Second)
		_, hit = f.sel(t, "s", "", bs)
		assert.False(t, hit)
		assert.Equal(t, 1800*time.Second, f.s.Table().TTL(""))
	})
	t.Run("ttl 0", func(t *testing.T) {
		f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(0)})
		bs := backends(t, 8)
		for range 3 {
			for i := range 50 {
				s := fmt.Sprintf("s%d", i)
				got, hit := f.sel(t, s, "", bs)
				assert.False(t, hit)
				assert.Equal(t, hrwWinner(s, bs), got)
			}
		}
		assert.Equal(t, 0, f.s.Len())
		assert.Equal(t, uint64(150), f.s.Stats().Misses)
		assert.Equal(t, 150, f.rec.Misses(""))
		_, ok := f.s.Lookup("s1", "")
		assert.False(t, ok)
		f.s.Health().MarkDown(hrwWinner("s1", bs))
		got, _ := f.sel(t, "s1", "", bs)
		assert.Equal(t, hrwWinner("s1", without(bs, hrwWinner("s1", bs))), got)
	})
	t.Run("per-tier ttl", func(t *testing.T) {
		f := newFixture(t, affinity.Config{
			StickyTTLSeconds: affinity.TTLSeconds(100),
			Tiers: map[string]affinity.TierConfig{
				"short": {StickyTTLSeconds: affinity.TTLSeconds(10)},
				"off":   {StickyTTLSeconds: affinity.TTLSeconds(0)},
				"same":  {},
			},
		})
		bs := backends(t, 4)
		for _, tier := range []string{"", "short", "off", "same"} {
			_, _ = f.sel(t, "s", tier, bs)
		}
		assert.Equal(t, 3, f.s.Len(), "tier off stores nothing")
		f.clk.Advance(10 * time.Second)
		_, hit := f.sel(t, "s", "short", bs)
		assert.False(t, hit)
		_, hit = f.sel(t, "s", "same", bs)
		assert.True(t, hit, "nil tier TTL inherits 100s")
		_, hit = f.sel(t, "s", "off", bs)
		assert.False(t, hit)
		f.clk.Advance(90 * time.Second)
		assert.Equal(t, 2, f.s.Sweep(), "the default binding and the re-bound short one expire; 'same' was used 90s ago")
		assert.Equal(t, 1, f.s.Len())
	})
}

// Rule 7: each error returns its sentinel and changes nothing.
func TestRule7Errors(t *testing.T) {
	bs := backends(t, 4)
	long := strings.Repeat("x", affinity.DefaultMaxSessionIDBytes+1)
	cases := []struct {
		name    string
		session string
		tier    string
		cands   []affinity.Backend
		down    []string
		want    error
	}{
		{"empty session", "", "", bs, nil, affinity.ErrEmptySessionID},
		{"session too long", long, "", bs, nil, affinity.ErrSessionIDTooLong},
		{"tier too long", "s", strings.Repeat("t", 256), bs, nil, affinity.ErrTierTooLong},
		{"no candidates", "s", "", nil, nil, affinity.ErrNoCandidates},
		{"empty candidates", "s", "", []affinity.Backend{}, nil, affinity.ErrNoCandidates},
		{"zero backend", "s", "", []affinity.Backend{bs[0], {}}, nil, affinity.ErrInvalidBackend},
		{"zero backend after the bound one", "bound", "", []affinity.Backend{bs[0], bs[1], {}}, nil, affinity.ErrInvalidBackend},
		{"zero backend, ttl-0 tier", "s", "off", []affinity.Backend{{}, bs[0]}, nil, affinity.ErrInvalidBackend},
		{"all down", "s", "", bs[:2], []string{bs[0].ID(), bs[1].ID()}, affinity.ErrNoEligibleBackend},
		{"all down, bound session", "bound", "", bs[:2], []string{bs[0].ID(), bs[1].ID()}, affinity.ErrNoEligibleBackend},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, affinity.Config{Tiers: map[string]affinity.TierConfig{"off": {StickyTTLSeconds: affinity.TTLSeconds(0)}}})
			_, _ = f.sel(t, "bound", "", bs[:2])
			for _, id := range tc.down {
				f.s.Health().MarkDown(id) // not OnBackendDown: the binding stays
			}
			before, n, events := f.s.Stats(), f.s.Len(), f.rec.Len()
			b, hit, err := f.s.SelectBackend(tc.session, tc.tier, tc.cands)
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, affinity.Backend{}, b)
			assert.False(t, hit)
			assert.Equal(t, before, f.s.Stats(), "nothing counted")
			assert.Equal(t, n, f.s.Len(), "nothing stored")
			assert.Equal(t, events, f.rec.Len(), "nothing recorded")
			assert.Less(t, len(err.Error()), 200, "no huge session ID in the message: %s", err)
		})
	}
	t.Run("more candidates than the stack buffer", func(t *testing.T) {
		// Over 64 candidates the miss path goes through hrw.Best instead of a stack copy
		// ranked by hrw.Pick: same winner, same validation.
		many := make([]affinity.Backend, 100)
		nodes := make([]hrw.Node, len(many))
		for i := range many {
			many[i] = affinity.MustBackend(fmt.Sprintf("b%03d", i), "", float64(1+i%3))
			nodes[i] = many[i].Node()
		}
		f := newFixture(t, affinity.Config{})
		for i := range 50 {
			sid := fmt.Sprintf("many-%d", i)
			b, hit := f.sel(t, sid, "", many)
			assert.False(t, hit)
			assert.Equal(t, many[hrw.Pick(hrw.KeyHash(sid), nodes)].ID(), b, sid)
		}
		withZero := append(slices.Clone(many), affinity.Backend{})
		before := f.s.Stats()
		_, _, err := f.s.SelectBackend("many-new", "", withZero)
		require.ErrorIs(t, err, affinity.ErrInvalidBackend)
		assert.Equal(t, before, f.s.Stats(), "nothing counted")
	})
	t.Run("max session id bytes", func(t *testing.T) {
		f := newFixture(t, affinity.Config{MaxSessionIDBytes: 4})
		_, _, err := f.s.SelectBackend("12345", "", bs)
		assert.ErrorIs(t, err, affinity.ErrSessionIDTooLong)
		_, hit := f.sel(t, "1234", "", bs)
		assert.False(t, hit)
	})
	t.Run("NewBackend", func(t *testing.T) {
		for _, w := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
			_, err := affinity.NewBackend("a", "", w)
			assert.ErrorIs(t, err, affinity.ErrInvalidBackend, "weight %v", w)
		}
		_, err := affinity.NewBackend("", "addr", 1)
		assert.ErrorIs(t, err, affinity.ErrInvalidBackend)
		b, err := affinity.NewBackend("a", "addr", 0)
		require.NoError(t, err)
		assert.Equal(t, 1.0, b.Weight(), "weight 0 means 1")
		assert.Equal(t, "a@addr", b.String())
		assert.Panics(t, func() { affinity.MustBackend("", "", 1) })
	})
	t.Run("duplicates collapse to the first", func(t *testing.T) {
		f := newFixture(t, affinity.Config{})
		heavy := affinity.MustBackend(bs[1].ID(), "dup-addr", 1000)
		for i := range 100 {
			s := fmt.Sprintf("s%d", i)
			cands := []affinity.Backend{bs[0], bs[1], bs[2], heavy}
			b, _, err := f.s.SelectBackend(s, "", cands)
			require.NoError(t, err)
			assert.Equal(t, hrwWinner(s, bs[:3]), b.ID(), "the duplicate's weight is ignored")
			assert.NotEqual(t, "dup-addr", b.Addr())
			b, hit, err := f.s.SelectBackend(s, "", cands)
			require.NoError(t, err)
			assert.True(t, hit)
			assert.NotEqual(t, "dup-addr", b.Addr(), "a hit returns the first copy")
		}
	})
}

// Rule 8: determinism — order independence and agreement between independent Schedulers.
func TestRule8Determinism(t *testing.T) {
	bs := backends(t, 12)
	a := newFixture(t, affinity.Config{})
	b := newFixture(t, affinity.Config{MaxBindings: 1 << 16}) // a different shard layout
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		s := fmt.Sprintf("sess-%d", i)
		ca := slices.Clone(bs)
		cb := slices.Clone(bs)
		rng.Shuffle(len(ca), func(i, j int) { ca[i], ca[j] = ca[j], ca[i] })
		rng.Shuffle(len(cb), func(i, j int) { cb[i], cb[j] = cb[j], cb[i] })
		ga, _ := a.sel(t, s, "", ca)
		gb, _ := b.sel(t, s, "", cb)
		require.Equal(t, ga, gb, s)
		require.Equal(t, hrwWinner(s, bs), ga)
	}
	// The same OnBackendDown on both replicas: identical rebinds.
	assert.Equal(t, a.s.OnBackendDown(bs[3].ID()), b.s.OnBackendDown(bs[3].ID()))
	for i := range 500 {
		s := fmt.Sprintf("sess-%d", i)
		ga, ha := a.sel(t, s, "", bs)
		gb, hb := b.sel(t, s, "", bs)
		require.Equal(t, ga, gb)
		require.Equal(t, ha, hb)
	}
	assert.Equal(t, a.s.Stats(), b.s.Stats())
}

// Rule 10: bounded memory, LRU eviction counted; expired bindings reclaimed.
func TestRule10BoundedMemory(t *testing.T) {
	t.Run("cap and evictions", func(t *testing.T) {
		const max = 1000
		f := newFixture(t, affinity.Config{MaxBindings: max})
		bs := backends(t, 8)
		for i := range 2 * max {
			_, hit := f.sel(t, fmt.Sprintf("s%d", i), "t", bs)
			require.False(t, hit)
			require.LessOrEqual(t, f.s.Len(), max)
		}
		assert.Equal(t, max, f.s.Len())
		st := f.s.Stats()
		assert.Equal(t, uint64(max), st.Evictions)
		assert.Equal(t, max, f.rec.Evictions("t"))
		// The most recent sessions survived; LRU is per shard, so at least most of the
		// newest ones are there and the oldest are gone.
		_, ok := f.s.Lookup("s0", "t")
		assert.False(t, ok)
		_, ok = f.s.Lookup(fmt.Sprintf("s%d", 2*max-1), "t")
		assert.True(t, ok)
	})
	t.Run("LRU, not FIFO", func(t *testing.T) {
		f := newFixture(t, affinity.Config{MaxBindings: 2})
		bs := backends(t, 2)
		_, _ = f.sel(t, "a", "", bs)
		f.clk.Advance(time.Second)
		_, _ = f.sel(t, "b", "", bs)
		f.clk.Advance(time.Second)
		_, hit := f.sel(t, "a", "", bs) // a is now the most recent
		require.True(t, hit)
		_, _ = f.sel(t, "c", "", bs)
		_, ok := f.s.Lookup("a", "")
		assert.True(t, ok)
		_, ok = f.s.Lookup("b", "")
		assert.False(t, ok, "b was the least recently used")
	})
	t.Run("sweep drains after TTL", func(t *testing.T) {
		f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(60), MaxBindings: 5000})
		bs := backends(t, 8)
		for i := range 3000 {
			_, _ = f.sel(t, fmt.Sprintf("s%d", i), "", bs)
		}
		f.clk.Advance(59 * time.Second)
		assert.Equal(t, 0, f.s.Sweep())
		f.clk.Advance(time.Second)
		assert.Equal(t, 3000, f.s.Sweep())
		assert.Equal(t, 0, f.s.Len())
		assert.Equal(t, uint64(3000), f.s.Stats().Expired)
		assert.Zero(t, f.s.Stats().Evictions)
	})
	t.Run("inserts reclaim expired bindings", func(t *testing.T) {
		f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(60)})
		bs := backends(t, 8)
		for i := range 2000 {
			_, _ = f.sel(t, fmt.Sprintf("old%d", i), "", bs)
		}
		f.clk.Advance(time.Hour)
		for i := range 2000 {
			_, _ = f.sel(t, fmt.Sprintf("new%d", i), "", bs)
		}
		// Each insert reclaims up to 2 expired bindings of its shard: nearly all old ones
		// go without a Sweep (a shard that got fewer than half as many new sessions as
		// old ones keeps the rest until Sweep).
		reclaimed := f.s.Stats().Expired
		assert.Greater(t, reclaimed, uint64(1990))
		assert.Equal(t, 4000-int(reclaimed), f.s.Len())
		assert.Equal(t, 2000-int(reclaimed), f.s.Sweep())
		assert.Equal(t, 2000, f.s.Len())
	})
}

// Rule 11: the recorder gets the tier only; every event kind is reported.
func TestRule11Metrics(t *testing.T) {
	f := newFixture(t, affinity.Config{MaxBindings: 1})
	bs := backends(t, 2)
	_, _ = f.sel(t, "s1", "gold", bs)                 // miss
	_, _ = f.sel(t, "s1", "gold", bs)                 // hit
	_, _ = f.sel(t, "s2", "silver", bs)               // miss + evict gold
	old, _ := f.s.Lookup("s2", "silver")              //
	_, _ = f.sel(t, "s2", "silver", without(bs, old)) // broken not_candidate + miss
	want := []metrics.Event{
		{Kind: metrics.KindMiss, Tier: "gold"},
		{Kind: metrics.KindHit, Tier: "gold"},
		{Kind: metrics.KindEvicted, Tier: "gold"},
		{Kind: metrics.KindMiss, Tier: "silver"},
		{Kind: metrics.KindBroken, Tier: "silver", Reason: metrics.ReasonNotCandidate},
		{Kind: metrics.KindMiss, Tier: "silver"},
	}
	assert.Equal(t, want, f.rec.Events())
	st := f.s.Stats()
	assert.Equal(t, affinity.Stats{Hits: 1, Misses: 3, Evictions: 1, Bindings: 1,
		Broken: affinity.BrokenStats{NotCandidate: 1}}, st)
	assert.InDelta(t, 0.25, st.HitRate(), 1e-9)
}

// The reference load study: 12 sessions x 6 turns -> 60/72 hits; 72 fresh single-turn
// sessions -> 0.
func TestLoadStudy(t *testing.T) {
	bs := backends(t, 4)
	t.Run("affinity on", func(t *testing.T) {
		c := metrics.NewCounters()
		f := newFixture(t, affinity.Config{}, affinity.WithRecorder(c))
		for turn := range 6 {
			for s := range 12 {
				f.clk.Advance(3 * time.Second)
				_, hit := f.sel(t, fmt.Sprintf("agent-%02d", s), "", bs)
				assert.Equal(t, turn > 0, hit)
			}
		}
		st := f.s.Stats()
		assert.Equal(t, uint64(60), st.Hits)
		assert.Equal(t, uint64(12), st.Misses)
		assert.Equal(t, "83.3", fmt.Sprintf("%.1f", 100*st.HitRate()))
		assert.Equal(t, uint64(60), c.Total().Hits)
		assert.Equal(t, uint64(12), c.Total().Misses)
	})
	t.Run("fresh IDs", func(t *testing.T) {
		f := newFixture(t, affinity.Config{})
		for i := range 72 {
			_, hit := f.sel(t, fmt.Sprintf("single-%02d", i), "", bs)
			assert.False(t, hit)
		}
		st := f.s.Stats()
		assert.Equal(t, uint64(0), st.Hits)
		assert.Equal(t, uint64(72), st.Misses)
		assert.Equal(t, "0.0", fmt.Sprintf("%.1f", 100*st.HitRate()))
	})
}

func TestStatsAfterErrorsIsZero(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	_, _, err := f.s.SelectBackend("", "", nil)
	require.True(t, errors.Is(err, affinity.ErrEmptySessionID))
	assert.Equal(t, affinity.Stats{}, f.s.Stats())
}
