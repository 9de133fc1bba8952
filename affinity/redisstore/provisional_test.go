package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

// without returns cands minus the backend id.
func without(cands []affinity.Backend, id string) []affinity.Backend {
	var out []affinity.Backend
	for _, b := range cands {
		if b.ID() != id {
			out = append(out, b)
		}
	}
	return out
}

// TestProvisionalBindingAdoptsTheFleets is tester25's split against a real Redis: replica
// 0 binds a session while Redis is down (locally, on x); Redis returns empty and replica
// 1, which sees x gone for a moment, claims the session on y. Past the retry interval,
// replica 0's next turn confirms its binding with Redis and adopts y, and from then on
// both replicas serve the session from y as hits.
func TestProvisionalBindingAdoptsTheFleets(t *testing.T) {
	f := newFleet(t, 2, affinity.Config{})
	const s = "split-session"
	f.srv.Stop()
	x, hit := f.sel(t, 0, s)
	require.False(t, hit)
	require.Positive(t, f.scheds[0].StoreErrors())
	f.srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range f.stores { // reconnected before the turns that must reach Redis
		for st.Ping(ctx) != nil {
			require.NoError(t, ctx.Err())
		}
	}
	b, _, err := f.scheds[1].SelectBackend(s, "", without(f.cands, x))
	require.NoError(t, err)
	y := b.ID()
	require.NotEqual(t, x, y)

	f.clk.Advance(time.Second) // replica 0's retry interval is over
	for turn := range 6 {
		got, hit := f.sel(t, turn%2, s)
		require.True(t, hit, "turn %d", turn)
		require.Equal(t, y, got, "turn %d", turn)
	}
	key := f.stores[0].Key(affinity.StoreKey{Session: hrw.KeyHash(s), Tier: hrw.KeyHash("")})
	v, err := f.rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, y, v)
}
