package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

// A Redis value that cannot be a backend ID (over affinity.MaxBackendIDBytes, written by
// another program or left by a damaged server) is never stored in a replica's table: the
// scripts treat such a key as absent (tester36), so the miss claims it for the HRW winner
// and a refresh re-creates the replica's binding, each a repair (Store.Repairs). A value
// within the limit that names no candidate is a binding elsewhere: a refresh that finds
// it drops the local copy.
func TestRedisValueOverBackendIDLimit(t *testing.T) {
	f := newFleet(t, 2, affinity.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := f.stores[0].Key(affinity.StoreKey{Session: hrw.KeyHash("s"), Tier: hrw.KeyHash("")})
	long := strings.Repeat("b", affinity.MaxBackendIDBytes+1)
	require.NoError(t, f.rdb.Set(ctx, key, long, time.Hour).Err())

	got, hit := f.sel(t, 0, "s")
	require.False(t, hit, "an over-long value is no binding to adopt")
	id, ok := f.scheds[0].Lookup("s", "")
	require.True(t, ok)
	require.Equal(t, got, id)
	v, err := f.rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, got, v, "the value is replaced by compare-and-set")

	require.Equal(t, uint64(1), f.stores[0].Repairs(), "the claim repaired the key")

	// The other replica adopts the repaired binding; the over-long value written again
	// behind its back is repaired by its refresh, which re-creates its binding.
	b1, hit := f.sel(t, 1, "s")
	require.True(t, hit)
	require.Equal(t, got, b1)
	require.NoError(t, f.rdb.Set(ctx, key, long, time.Hour).Err())
	f.stores[1].Refresh(affinity.StoreKey{Session: hrw.KeyHash("s"), Tier: hrw.KeyHash("")}, got, time.Hour)
	f.sync(t)
	v, err = f.rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, got, v, "the refresh repaired the key")
	require.Equal(t, uint64(1), f.stores[1].Repairs())
	_, ok = f.scheds[1].Lookup("s", "")
	require.True(t, ok, "the refresh found no other binding: the local copy is kept")

	// A value of the maximum length that names no candidate is another binding: the
	// refresh drops the local copy and leaves the key alone.
	other := strings.Repeat("b", affinity.MaxBackendIDBytes)
	require.NoError(t, f.rdb.Set(ctx, key, other, time.Hour).Err())
	f.stores[1].Refresh(affinity.StoreKey{Session: hrw.KeyHash("s"), Tier: hrw.KeyHash("")}, got, time.Hour)
	f.sync(t)
	_, ok = f.scheds[1].Lookup("s", "")
	require.False(t, ok, "the refresh found another value: the local copy is dropped")
	v, err = f.rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, other, v)
	require.Equal(t, uint64(1), f.stores[1].Repairs(), "no repair")
	for _, s := range f.scheds {
		s.Table().Range(func(b affinity.Binding) bool {
			require.LessOrEqual(t, len(b.BackendID), affinity.MaxBackendIDBytes)
			return true
		})
	}
}
