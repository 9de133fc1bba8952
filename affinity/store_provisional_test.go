package affinity_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

var errRefused = errors.New("connection refused")

func (s *memStore) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

// calls returns how many Claims and Rebinds the store has seen.
func (s *memStore) calls() (claims, rebinds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims, s.rebinds
}

// bound returns the store's binding of (session, tier "").
func (s *memStore) bound(session string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[affinity.StoreKey{Session: hrw.KeyHash(session), Tier: hrw.KeyHash("")}]
}

// provisionalFleet is two replicas A and B on one store (retry_after 1 s) where A bound
// session "s" on its HRW winner x while its store call failed, so locally only; y is
// the winner without x.
type provisionalFleet struct {
	st    *memStore
	a, b  *fixture
	cands []affinity.Backend
	x, y  string
}

func newProvisionalFleet(t *testing.T) *provisionalFleet {
	t.Helper()
	st := newMemStore()
	opts := []affinity.Option{affinity.WithStore(st), affinity.WithStoreTimeouts(0, time.Second)}
	p := &provisionalFleet{st: st, a: newFixture(t, affinity.Config{}, opts...), b: newFixture(t, affinity.Config{}, opts...), cands: backends(t, 4)}
	st.setFail(errRefused)
	var hit bool
	p.x, hit = p.a.sel(t, "s", "", p.cands)
	require.False(t, hit)
	st.setFail(nil)
	require.Empty(t, st.bound("s"), "A decided without the store")
	p.y = hrwWinner("s", without(p.cands, p.x))
	return p
}

// A binding decided while the store failed is confirmed with the store on its next turn
// once the store is usable again, before the turn is answered: one Claim, then the
// fleet's binding is kept or adopted, or the local one is kept (and the store's moved to
// it when the store's backend is unusable here). Each case then stays where it went,
// with no further store call.
func TestStoreProvisionalBindingConfirmed(t *testing.T) {
	tests := []struct {
		name string
		// fleet sets up the store's binding of "s" (B's view) and A's view; it returns
		// A's candidates.
		fleet       func(t *testing.T, p *provisionalFleet) []affinity.Backend
		fail        bool // the confirming call fails
		want        func(p *provisionalFleet) string
		wantStore   func(p *provisionalFleet) string
		wantRebinds int
		wantBroken  affinity.BrokenStats
	}{
		{
			name:      "store empty: claimed",
			fleet:     func(t *testing.T, p *provisionalFleet) []affinity.Backend { return p.cands },
			want:      func(p *provisionalFleet) string { return p.x },
			wantStore: func(p *provisionalFleet) string { return p.x },
		},
		{
			name: "fleet on the same backend",
			fleet: func(t *testing.T, p *provisionalFleet) []affinity.Backend {
				p.b.sel(t, "s", "", p.cands)
				return p.cands
			},
			want:      func(p *provisionalFleet) string { return p.x },
			wantStore: func(p *provisionalFleet) string { return p.x },
		},
		{
			name: "fleet elsewhere: adopted",
			fleet: func(t *testing.T, p *provisionalFleet) []affinity.Backend {
				p.b.sel(t, "s", "", without(p.cands, p.x))
				return p.cands
			},
			want:      func(p *provisionalFleet) string { return p.y },
			wantStore: func(p *provisionalFleet) string { return p.y },
		},
		{
			name: "fleet on a backend draining here: adopted",
			fleet: func(t *testing.T, p *provisionalFleet) []affinity.Backend {
				p.b.sel(t, "s", "", without(p.cands, p.x))
				p.a.s.OnBackendDraining(p.y)
				return p.cands
			},
			want:      func(p *provisionalFleet) string { return p.y },
			wantStore: func(p *provisionalFleet) string { return p.y },
		},
		{
			name: "fleet on a backend Down here: moved to ours",
			fleet: func(t *testing.T, p *provisionalFleet) []affinity.Backend {
				p.b.sel(t, "s", "", without(p.cands, p.x))
				p.a.s.OnBackendDown(p.y)
				return p.cands
			},
			want:        func(p *provisionalFleet) string { return p.x },
			wantStore:   func(p *provisionalFleet) string { return p.x },
			wantRebinds: 1,
			wantBroken:  affinity.BrokenStats{Unhealthy: 1},
		},
		{
			name: "fleet on a backend not a candidate here: moved to ours",
			fleet: func(t *testing.T, p *provisionalFleet) []affinity.Backend {
				p.b.sel(t, "s", "", without(p.cands, p.x))
				return without(p.cands, p.y)
			},
			want:        func(p *provisionalFleet) string { return p.x },
			wantStore:   func(p *provisionalFleet) string { return p.x },
			wantRebinds: 1,
			wantBroken:  affinity.BrokenStats{NotCandidate: 1},
		},
		{
			name: "store fails again: answered locally, still provisional",
			fleet: func(t *testing.T, p *provisionalFleet) []affinity.Backend {
				p.b.sel(t, "s", "", without(p.cands, p.x))
				return p.cands
			},
			fail:      true,
			want:      func(p *provisionalFleet) string { return p.x },
			wantStore: func(p *provisionalFleet) string { return p.y },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvisionalFleet(t)
			require.NotEqual(t, p.x, p.y)
			candsA := tc.fleet(t, p)
			p.a.clk.Advance(time.Second) // the store is usable again for A
			claims, rebinds := p.st.calls()
			if tc.fail {
				p.st.setFail(errRefused)
			}
			got, hit := p.a.sel(t, "s", "", candsA)
			require.True(t, hit, "a confirmed or adopted binding is a hit")
			require.Equal(t, tc.want(p), got)
			require.Equal(t, tc.wantStore(p), p.st.bound("s"))
			c, r := p.st.calls()
			require.Equal(t, 1, c-claims, "one Claim confirms")
			require.Equal(t, tc.wantRebinds, r-rebinds)
			require.Equal(t, tc.wantBroken, p.a.s.Stats().Broken)
			if tc.fail {
				require.Equal(t, uint64(2), p.a.s.StoreErrors())
				p.st.setFail(nil)
				p.a.clk.Advance(time.Second)
				got, hit = p.a.sel(t, "s", "", candsA)
				require.True(t, hit)
				require.Equal(t, p.y, got, "still provisional: confirmed and adopted once the store answers")
				c2, _ := p.st.calls()
				require.Equal(t, 2, c2-claims)
			}
			// Confirmed: later turns are plain hits, no store call.
			claims, rebinds = p.st.calls()
			want := got
			for range 3 {
				p.a.clk.Advance(time.Second)
				got, hit = p.a.sel(t, "s", "", candsA)
				require.True(t, hit)
				require.Equal(t, want, got)
			}
			c, r = p.st.calls()
			require.Equal(t, [2]int{claims, rebinds}, [2]int{c, r}, "no store call once confirmed")
		})
	}
}

// The finding this fixes: replica A decided session s locally during a store error,
// replica B bound it elsewhere through the store; once the store is usable, A's turns
// follow the fleet's binding instead of alternating with B's for the rest of the session.
func TestStoreProvisionalTwoReplicasConverge(t *testing.T) {
	p := newProvisionalFleet(t)
	got, _ := p.b.sel(t, "s", "", without(p.cands, p.x)) // B sees x gone for a moment
	require.Equal(t, p.y, got)
	p.a.clk.Advance(time.Second)
	for turn := range 6 {
		r := p.a
		if turn%2 == 1 {
			r = p.b
		}
		r.clk.Advance(time.Second)
		got, hit := r.sel(t, "s", "", p.cands)
		require.True(t, hit)
		require.Equal(t, p.y, got, "turn %d", turn)
	}
}

// A binding restored from a snapshot is not provisional: its hits make no store call.
func TestStoreRestoredBindingNotProvisional(t *testing.T) {
	p := newProvisionalFleet(t)
	var buf bytes.Buffer
	_, err := p.a.s.Snapshot(&buf)
	require.NoError(t, err)
	c := newFixture(t, affinity.Config{}, affinity.WithStore(p.st))
	_, err = c.s.Restore(&buf)
	require.NoError(t, err)
	claims, _ := p.st.calls()
	got, hit := c.sel(t, "s", "", p.cands)
	require.True(t, hit)
	require.Equal(t, p.x, got)
	c2, _ := p.st.calls()
	require.Equal(t, claims, c2)
}

// A load spill decided locally while the store fails (its compare-and-set failed) is
// provisional too: once the store answers, the session's next turn adopts the fleet's
// binding, which still names the backend the spill left, rather than keep a move the
// other replicas never saw (a later spill is then a compare-and-set in the store).
func TestStoreProvisionalLocalSpill(t *testing.T) {
	st := newMemStore()
	bs := backendsN(4)
	s, clk := newSched(t, loadCfg(1.5, 1), affinity.WithStore(st), affinity.WithStoreTimeouts(0, time.Second))
	first, err := acquire(s, "sess", "", bs, 1000)
	require.NoError(t, err)
	first.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
	home := first.Backend.ID()
	for _, b := range bs { // load home through another session's lease
		if b.ID() == home {
			_, err := acquire(s, "pile", "", []affinity.Backend{b}, 50000)
			require.NoError(t, err)
		}
	}
	st.setFail(errRefused)
	l, err := acquire(s, "sess", "", bs, 1000)
	require.NoError(t, err)
	require.Equal(t, affinity.OutcomeSpill, l.Outcome)
	require.NotEqual(t, home, l.Backend.ID())
	l.Done(affinity.DoneInfo{})
	require.Equal(t, home, st.bound("sess"), "the spill was not seen by the store")
	st.setFail(nil)
	clk.Advance(time.Second)
	claims, _ := st.calls()
	l, err = acquire(s, "sess", "", bs, 1000)
	require.NoError(t, err)
	require.Equal(t, affinity.OutcomeHit, l.Outcome)
	require.Equal(t, home, l.Backend.ID(), "the fleet's binding is adopted")
	c, _ := st.calls()
	require.Equal(t, claims+1, c)
}
