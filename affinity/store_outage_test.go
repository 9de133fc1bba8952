package affinity_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// refreshingStore is a memStore whose Refresh does what Store.Refresh asks of a real
// store: re-create a lost binding, and when the key is bound to another backend, change
// nothing and tell the replica (here: every registered Watch; a replica whose copy is
// already that backend ignores it), so that the local copy is dropped.
type refreshingStore struct{ *memStore }

func (s refreshingStore) Refresh(k affinity.StoreKey, b string, ttl time.Duration) {
	s.memStore.Refresh(k, b, ttl)
	s.mu.Lock()
	cur, ok := s.m[k]
	if !ok {
		s.m[k] = b
	}
	fns := s.watch
	s.mu.Unlock()
	if ok && cur != b {
		for _, fn := range fns {
			fn(k, cur)
		}
	}
}

// clear empties the store, as a Redis restarted without persistence is.
func (s refreshingStore) clear() {
	s.mu.Lock()
	clear(s.m)
	s.mu.Unlock()
}

// A binding confirmed before a store outage is refreshed on its first hit after the
// store is usable again, not only at its next TTL/8 boundary: the store may have lost it
// and taken another replica's claim meanwhile (tester26: a Redis restart split a session
// between two replicas for up to TTL/8). The refresh finds the other binding, the local
// copy is dropped, and the next turn adopts the fleet's binding. One extra refresh per
// binding per outage.
func TestStoreRefreshAfterOutage(t *testing.T) {
	st := refreshingStore{newMemStore()}
	opts := []affinity.Option{affinity.WithStore(st), affinity.WithStoreTimeouts(0, time.Second)}
	cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(800)} // refresh period 100 s
	a, b := newFixture(t, cfg, opts...), newFixture(t, cfg, opts...)
	cands := backends(t, 4)

	x, hit := a.sel(t, "s", "", cands) // A claims "s" on x
	require.False(t, hit)
	require.Equal(t, x, st.bound("s"))
	a.clk.Advance(time.Second)
	_, hit = a.sel(t, "s", "", cands)
	require.True(t, hit)
	r0 := st.refreshes

	// The store fails one of A's calls (A skips it for 1 s) and restarts empty; B then
	// claims "s" on another backend (its candidates lack x).
	st.setFail(errRefused)
	_, _ = a.sel(t, "other", "", cands)
	require.Equal(t, uint64(1), a.s.StoreErrors())
	st.setFail(nil)
	st.clear()
	y, hit := b.sel(t, "s", "", without(cands, x))
	require.False(t, hit)
	require.NotEqual(t, x, y)
	require.Equal(t, y, st.bound("s"))

	// Within the retry interval A answers locally and refreshes nothing.
	a.clk.Advance(500 * time.Millisecond)
	got, hit := a.sel(t, "s", "", cands)
	assert.True(t, hit)
	assert.Equal(t, x, got)
	assert.Equal(t, r0, st.refreshes, "no refresh while the store is skipped")

	// The first hit after it refreshes at once (no period boundary is crossed: 2.5 s of
	// a 100 s period, the same as the no-refresh check below) and learns of y ...
	a.clk.Advance(time.Second)
	got, hit = a.sel(t, "s", "", cands)
	assert.True(t, hit)
	assert.Equal(t, x, got, "this turn is answered from the local copy")
	assert.Equal(t, r0+1, st.refreshes, "one refresh on the first hit after the outage")

	// ... so the next turn takes the fleet's binding.
	a.clk.Advance(time.Second)
	got, hit = a.sel(t, "s", "", cands)
	assert.True(t, hit, "the fleet's binding, adopted")
	assert.Equal(t, y, got)
	a.clk.Advance(time.Second)
	_, _ = a.sel(t, "s", "", cands)
	assert.Equal(t, r0+1, st.refreshes, "no further refresh until the next period")
}
