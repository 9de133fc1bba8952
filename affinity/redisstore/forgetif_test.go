package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/hrw"
)

// Store.ForgetIf deletes a shared binding only while it names the backend.
func TestStoreForgetIf(t *testing.T) {
	f := newFleet(t, 1, affinity.Config{})
	st := f.stores[0]
	ctx := context.Background()
	for i, tt := range []struct {
		name    string
		bound   string // "" none
		arg     string
		want    bool
		kept    bool
		wantErr error
	}{
		{name: "bound to it", bound: "b0", arg: "b0", want: true},
		{name: "bound elsewhere", bound: "b1", arg: "b0", kept: true},
		{name: "absent", arg: "b0"},
		{name: "prefix of the bound ID", bound: "b10", arg: "b1", kept: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := affinity.StoreKey{Session: uint64(i + 1)}
			if tt.bound != "" {
				_, claimed, err := st.Claim(ctx, key, tt.bound, time.Minute)
				require.NoError(t, err)
				require.True(t, claimed)
			}
			got, err := st.ForgetIf(ctx, key, tt.arg)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			v, err := f.rdb.Get(ctx, st.Key(key)).Result()
			if tt.kept {
				require.NoError(t, err)
				require.Equal(t, tt.bound, v)
			} else {
				require.ErrorIs(t, err, redis.Nil)
			}
		})
	}
	require.NoError(t, st.Close())
	_, err := st.ForgetIf(ctx, affinity.StoreKey{Session: 1}, "b0")
	require.ErrorIs(t, err, redisstore.ErrClosed)
}

// Scheduler.ForgetIf in a fleet: the replica that placed the session forgets it only
// while the shared binding still names that backend; a forget reaches every replica, and
// a move by another replica (its message not yet here) is kept.
func TestFleetForgetIf(t *testing.T) {
	f := newFleet(t, 2, affinity.Config{})
	ctx := context.Background()
	b, _ := f.sel(t, 0, "s")
	f.sync(t)
	_, hit := f.sel(t, 1, "s")
	require.True(t, hit)
	require.True(t, f.scheds[0].ForgetIf("s", "", b))
	f.sync(t)
	for r := range f.scheds {
		_, ok := f.scheds[r].Lookup("s", "")
		require.False(t, ok, "replica %d still holds s", r)
	}

	// Another replica moved t to "elsewhere"; its message has not arrived at replica 0.
	b, _ = f.sel(t, 0, "t")
	key := f.stores[0].Key(affinity.StoreKey{Session: hrw.KeyHash("t"), Tier: hrw.KeyHash("")})
	require.NoError(t, f.rdb.Set(ctx, key, "elsewhere", time.Minute).Err())
	require.True(t, f.scheds[0].ForgetIf("t", "", b), "the local binding named b")
	v, err := f.rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "elsewhere", v, "the move is kept")
	for _, s := range f.scheds {
		require.Zero(t, s.StoreErrors())
	}
}
