package affinity_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// resyncStore is one replica's view of a shared refreshingStore with the optional
// resync signal (affinity.StoreWatchResync): as a Redis store's, the signal belongs to
// the replica (its subscription), the bindings to the fleet. WatchResync replaces the
// function registered before.
type resyncStore struct {
	refreshingStore
	mu *sync.Mutex
	fn *func()
}

func newResyncStore(shared refreshingStore) resyncStore {
	return resyncStore{refreshingStore: shared, mu: &sync.Mutex{}, fn: new(func())}
}

func (s resyncStore) WatchResync(fn func()) {
	s.mu.Lock()
	*s.fn = fn
	s.mu.Unlock()
}

// signal is the store telling its Scheduler that invalidations may have been lost.
func (s resyncStore) signal() {
	s.mu.Lock()
	fn := *s.fn
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// refreshCount returns how many refreshes the shared store has seen.
func (s resyncStore) refreshCount() int {
	s.memStore.mu.Lock()
	defer s.memStore.mu.Unlock()
	return s.refreshes
}

var _ affinity.StoreWatchResync = resyncStore{}

// After the store's resync signal, each binding's first hit refreshes it at once (not
// at its TTL/8 boundary), and only its first: a binding last used after the signal is
// not refreshed again. A retry interval under way is not shortened by a signal: the
// store stays skipped until its end, and nothing is refreshed before it.
func TestStoreResyncRefreshesEachBindingOnce(t *testing.T) {
	// Refresh period 10,000 s: none of these sessions has a period boundary in the test's
	// 12 s, so every refresh counted is a resync's.
	cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(80000)}
	for _, tt := range []struct {
		name string
		// failFirst: a store call fails (retry interval 10 s) 1 s before the signal.
		failFirst bool
	}{
		{name: "store usable"},
		{name: "during a retry interval", failFirst: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newResyncStore(refreshingStore{newMemStore()})
			f := newFixture(t, cfg, affinity.WithStore(st), affinity.WithStoreTimeouts(0, 10*time.Second))
			cands := backends(t, 4)
			sessions := []string{"s0", "s1", "s2", "s3"}
			for _, s := range sessions {
				_, hit := f.sel(t, s, "", cands)
				require.False(t, hit)
			}
			f.clk.Advance(time.Second)
			if tt.failFirst {
				st.setFail(errRefused)
				_, _ = f.sel(t, "other", "", cands)
				require.Equal(t, uint64(1), f.s.StoreErrors())
				st.setFail(nil)
			}
			f.clk.Advance(time.Second)
			// s0 is used in the same clock reading as the signal, just before it: it may
			// have missed an invalidation too.
			_, hit := f.sel(t, "s0", "", cands)
			require.True(t, hit)
			r0 := st.refreshCount()
			claims0, _ := st.calls()

			st.signal()
			f.clk.Advance(time.Second)
			if tt.failFirst {
				// 2 s into the 10 s retry interval: the store is still skipped (a new
				// session is decided locally) and no hit refreshes.
				for _, s := range sessions {
					_, hit := f.sel(t, s, "", cands)
					require.True(t, hit)
				}
				_, hit := f.sel(t, "new", "", cands)
				require.False(t, hit)
				claims, _ := st.calls()
				require.Equal(t, claims0, claims, "the retry interval is not shortened")
				require.Equal(t, r0, st.refreshCount(), "no refresh during the retry interval")
				f.clk.Advance(9 * time.Second) // past its end
			}
			// s1..s3 were last used before the signal (and s0 in its clock reading): each
			// one's first hit refreshes.
			for i, s := range sessions {
				_, hit := f.sel(t, s, "", cands)
				require.True(t, hit)
				require.Equal(t, r0+i+1, st.refreshCount(), "first hit of %s after the signal", s)
			}
			// Used after the signal: no further refresh.
			f.clk.Advance(time.Second)
			for _, s := range sessions {
				_, hit := f.sel(t, s, "", cands)
				require.True(t, hit)
			}
			assert.Equal(t, r0+len(sessions), st.refreshCount(), "one refresh per binding per signal")
		})
	}
}

// A lost invalidation: replica B moves a session of replica A's while A's invalidation
// feed is down, and the store restarts empty, losing A's other binding. Without a
// failed call of its own A would keep its copy until the session's next TTL/8
// boundary; after its store's resync signal the session's first hit on A refreshes,
// finds B's binding and drops the copy, and the next turn adopts it; the other
// binding's first hit re-creates it in the store.
func TestStoreResyncAdoptsAMoveWhoseInvalidationWasLost(t *testing.T) {
	shared := refreshingStore{newMemStore()}
	sa, sb := newResyncStore(shared), newResyncStore(shared)
	cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(80000)} // no period boundary in the test
	a := newFixture(t, cfg, affinity.WithStore(sa))
	b := newFixture(t, cfg, affinity.WithStore(sb))
	cands := backends(t, 4)
	x, _ := a.sel(t, "moved", "", cands)
	kept, _ := a.sel(t, "kept", "", cands)
	a.clk.Advance(time.Second)

	// A's feed is down: B's claim after the store restarted empty reaches no one.
	shared.clear()
	b.clk.Advance(time.Second)
	y, hit := b.sel(t, "moved", "", without(cands, x))
	require.False(t, hit)
	require.NotEqual(t, x, y)

	sa.signal() // A's feed is back
	a.clk.Advance(time.Second)
	got, hit := a.sel(t, "moved", "", cands)
	assert.True(t, hit)
	assert.Equal(t, x, got, "this turn is answered from the local copy")
	got, _ = a.sel(t, "kept", "", cands)
	assert.Equal(t, kept, got)
	assert.Equal(t, kept, shared.bound("kept"), "re-created by its first hit after the signal")

	a.clk.Advance(time.Second)
	got, hit = a.sel(t, "moved", "", cands)
	assert.True(t, hit, "the fleet's binding, adopted")
	assert.Equal(t, y, got)
	assert.Zero(t, a.s.StoreErrors())
}
