package affinity_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// memStore is an in-memory affinity.Store shared by Schedulers in one process (TTLs
// ignored): enough to test what the Scheduler asks of a store and when.
type memStore struct {
	mu        sync.Mutex
	m         map[affinity.StoreKey]string
	watch     []func(affinity.StoreKey, string)
	claims    int
	rebinds   int
	refreshes int
	fail      error // Claim and Rebind fail with it
}

func newMemStore() *memStore { return &memStore{m: map[affinity.StoreKey]string{}} }

func (s *memStore) Claim(_ context.Context, k affinity.StoreKey, b string, _ time.Duration) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	if s.fail != nil {
		return "", false, s.fail
	}
	if v, ok := s.m[k]; ok {
		return v, false, nil
	}
	s.m[k] = b
	return b, true, nil
}

func (s *memStore) Rebind(_ context.Context, k affinity.StoreKey, old, b string, _ time.Duration) (string, bool, error) {
	s.mu.Lock()
	s.rebinds++
	if s.fail != nil {
		s.mu.Unlock()
		return "", false, s.fail
	}
	if v, ok := s.m[k]; ok && v != old {
		s.mu.Unlock()
		return v, false, nil
	}
	s.m[k] = b
	fns := s.watch
	s.mu.Unlock()
	for _, fn := range fns {
		fn(k, b)
	}
	return b, true, nil
}

func (s *memStore) Refresh(affinity.StoreKey, string, time.Duration) {
	s.mu.Lock()
	s.refreshes++
	s.mu.Unlock()
}

func (s *memStore) Forget(_ context.Context, k affinity.StoreKey) error {
	s.mu.Lock()
	delete(s.m, k)
	fns := s.watch
	s.mu.Unlock()
	for _, fn := range fns {
		fn(k, "")
	}
	return nil
}

func (s *memStore) Watch(fn func(affinity.StoreKey, string)) {
	s.mu.Lock()
	s.watch = append(s.watch, fn)
	s.mu.Unlock()
}

var _ affinity.Store = (*memStore)(nil)

// A hit refreshes the store at most once per TTL/8 per session, and never makes a Claim.
func TestStoreRefreshAtMostOncePerEighthTTL(t *testing.T) {
	st := newMemStore()
	f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(800)}, affinity.WithStore(st))
	cands := backends(t, 3)
	f.sel(t, "s", "", cands)
	require.Equal(t, 1, st.claims)
	// 100 s = TTL/8: hits every second for 10 periods.
	for range 1000 {
		f.clk.Advance(time.Second)
		_, hit := f.sel(t, "s", "", cands)
		require.True(t, hit)
	}
	require.Equal(t, 1, st.claims, "hits make no claim")
	require.Equal(t, 10, st.refreshes, "one refresh per TTL/8 period crossed")
}

// A failing store never fails a request: decisions are local, the error is counted once,
// and the store is left alone for the retry interval.
func TestStoreErrorFallsBack(t *testing.T) {
	st := newMemStore()
	st.fail = errors.New("connection refused")
	f := newFixture(t, affinity.Config{}, affinity.WithStore(st), affinity.WithStoreTimeouts(0, 10*time.Second))
	cands := backends(t, 3)
	for _, s := range []string{"s1", "s2", "s3"} {
		_, hit := f.sel(t, s, "", cands)
		require.False(t, hit)
	}
	require.Equal(t, uint64(1), f.s.StoreErrors())
	require.Equal(t, 1, st.claims)
	f.clk.Advance(10 * time.Second)
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	_, hit := f.sel(t, "s4", "", cands)
	require.False(t, hit)
	require.Equal(t, 2, st.claims, "retried after the interval")
}

// Negative store timeouts are refused with or without a store, by New and by NewTable
// (tester36: without WithStore New and NewTable used to accept them).
func TestWithStoreTimeoutsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name              string
		timeout, retryAft time.Duration
		withStore         bool
	}{
		{"timeout, with store", -time.Second, 0, true},
		{"retry, with store", 0, -1, true},
		{"timeout, no store", -1, 0, false},
		{"both, no store", -1, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []affinity.Option{affinity.WithStoreTimeouts(tc.timeout, tc.retryAft)}
			if tc.withStore {
				opts = append(opts, affinity.WithStore(newMemStore()))
			}
			s, err := affinity.New(affinity.Config{}, opts...)
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			require.Nil(t, s)
			tb, err := affinity.NewTable(affinity.Config{}, opts...)
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			require.Nil(t, tb)
		})
	}
	_, err := affinity.New(affinity.Config{}, affinity.WithStoreTimeouts(0, 0))
	require.NoError(t, err, "zero values are the defaults")
}

// Two Schedulers on one store: a rebind by one is adopted by the other, whose copy the
// invalidation dropped.
func TestStoreRebindInvalidatesOtherReplica(t *testing.T) {
	st := newMemStore()
	a := newFixture(t, affinity.Config{}, affinity.WithStore(st))
	b := newFixture(t, affinity.Config{}, affinity.WithStore(st))
	cands := backends(t, 3)
	first, _ := a.sel(t, "s", "", cands)
	got, hit := b.sel(t, "s", "", cands)
	require.True(t, hit)
	require.Equal(t, first, got)
	a.s.OnBackendDown(first)
	moved, hit := a.sel(t, "s", "", cands)
	require.False(t, hit)
	require.NotEqual(t, first, moved)
	_, ok := b.s.Lookup("s", "")
	require.False(t, ok, "invalidated")
	got, hit = b.sel(t, "s", "", cands)
	require.True(t, hit)
	require.Equal(t, moved, got)
	require.Equal(t, 1, st.rebinds)
}

// Concurrent first turns of one session on one replica with a store: one miss, one
// backend (the store's claim decides; a local binding found meanwhile is replaced).
func TestStoreConcurrentFirstTurnsOneReplica(t *testing.T) {
	st := newMemStore()
	f := newFixture(t, affinity.Config{}, affinity.WithStore(st))
	cands := backends(t, 5)
	for i := range 50 {
		session := fmt.Sprintf("s%d", i)
		got := make([]string, 8)
		var wg sync.WaitGroup
		for g := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, _, err := f.s.SelectBackend(session, "", cands)
				if err != nil {
					panic(err)
				}
				got[g] = b.ID()
			}()
		}
		wg.Wait()
		for _, b := range got {
			require.Equal(t, got[0], b)
		}
	}
	stats := f.s.Stats()
	require.Equal(t, uint64(50), stats.Misses)
	require.Equal(t, uint64(50*7), stats.Hits)
}
