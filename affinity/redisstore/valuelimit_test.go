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
// another program or left by a damaged server) is never stored in a replica's table: it
// names no candidate, so the miss rebinds the key to the HRW winner by compare-and-set,
// and a refresh that finds it only drops the local copy.
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

	// The other replica adopts the repaired binding; the over-long value written again
	// behind its back is seen by its refresh, which drops its copy and stores nothing.
	b1, hit := f.sel(t, 1, "s")
	require.True(t, hit)
	require.Equal(t, got, b1)
	require.NoError(t, f.rdb.Set(ctx, key, long, time.Hour).Err())
	f.stores[1].Refresh(affinity.StoreKey{Session: hrw.KeyHash("s"), Tier: hrw.KeyHash("")}, got, time.Hour)
	f.sync(t)
	_, ok = f.scheds[1].Lookup("s", "")
	require.False(t, ok, "the refresh found another value: the local copy is dropped")
	for _, s := range f.scheds {
		s.Table().Range(func(b affinity.Binding) bool {
			require.LessOrEqual(t, len(b.BackendID), affinity.MaxBackendIDBytes)
			return true
		})
	}
}
