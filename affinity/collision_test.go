package affinity_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

// collidingPairs are session IDs whose hrw.KeyHash agree in the top 6 bits (same shard
// of a 64-shard table) and in the low 32 bits (same index fingerprint and home slot) but
// differ in between. Found by a birthday search; the hash is pinned by golden vectors.
var collidingPairs = [][2]string{
	{"c124598", "c541908"},
	{"c237978", "c778383"},
	{"c425124", "c1062823"},
	{"c586436", "c1098726"},
}

// TestTableFullFingerprintCollisions: sessions whose index slots are identical (same
// shard, same low 32 bits) must be told apart by their keys, and deleting one (backward
// shift) must never lose the other, whatever the order, alongside filler keys in the
// same shards and several tiers per session.
func TestTableFullFingerprintCollisions(t *testing.T) {
	for _, p := range collidingPairs {
		a, b := hrw.KeyHash(p[0]), hrw.KeyHash(p[1])
		require.NotEqual(t, a, b)
		require.Equal(t, a>>58, b>>58, "%v: same shard", p)
		require.Equal(t, uint32(a), uint32(b), "%v: same low 32 bits", p)
	}
	tb, _, _ := newTable(t, affinity.Config{})
	var sessions []string
	for _, p := range collidingPairs {
		sessions = append(sessions, p[0], p[1])
	}
	for i := 0; len(sessions) < 8+400; i++ { // fillers in the pairs' shards
		s := fmt.Sprintf("f%d", i)
		for _, p := range collidingPairs {
			if hrw.KeyHash(s)>>58 == hrw.KeyHash(p[0])>>58 {
				sessions = append(sessions, s)
				break
			}
		}
	}
	type key struct{ session, tier string }
	model := map[key]string{}
	tiers := []string{"", "a", "gold"}
	rng := rand.New(rand.NewPCG(1, 2))
	for op := range 20_000 {
		// Half of the operations hit the colliding sessions.
		s := sessions[rng.IntN(8)]
		if rng.IntN(2) == 0 {
			s = sessions[rng.IntN(len(sessions))]
		}
		k := key{s, tiers[rng.IntN(len(tiers))]}
		switch rng.IntN(3) {
		case 0:
			id := fmt.Sprintf("b%d", rng.IntN(6))
			require.NoError(t, tb.Bind(k.session, k.tier, id))
			model[k] = id
		case 1:
			_, want := model[k]
			require.Equal(t, want, tb.Delete(k.session, k.tier), "op %d: Delete %v", op, k)
			delete(model, k)
		default:
			id, ok := tb.Get(k.session, k.tier)
			want, wok := model[k]
			require.Equal(t, wok, ok, "op %d: Get %v", op, k)
			require.Equal(t, want, id, "op %d: Get %v", op, k)
		}
	}
	require.Equal(t, len(model), tb.Len())
	for k, want := range model {
		id, ok := tb.Get(k.session, k.tier)
		require.True(t, ok, "%v", k)
		require.Equal(t, want, id, "%v", k)
	}
}

// TestSchedulerCollidingSessions: through the Scheduler, a colliding pair keeps two
// bindings; OnBackendDown, expiry and Forget of one leave the other intact.
func TestSchedulerCollidingSessions(t *testing.T) {
	f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(10)})
	bs := backends(t, 8)
	for _, p := range collidingPairs {
		x, y := p[0], p[1]
		bx, _ := f.sel(t, x, "", bs)
		by, _ := f.sel(t, y, "", without(bs, bx)) // y elsewhere
		require.NotEqual(t, bx, by)
		_, hit := f.sel(t, y, "", bs)
		require.True(t, hit)
		require.Equal(t, 1, f.s.OnBackendDown(bx)) // only x's binding
		got, ok := f.s.Lookup(y, "")
		require.True(t, ok)
		require.Equal(t, by, got)
		f.s.OnBackendUp(bx)
		bx, _ = f.sel(t, x, "", without(bs, by))
		f.clk.Advance(6 * time.Second)
		_, hit = f.sel(t, y, "", bs) // y refreshed, x not
		require.True(t, hit)
		f.clk.Advance(5 * time.Second)
		_, ok = f.s.Lookup(x, "")
		require.False(t, ok, "x expired")
		require.Equal(t, 1, f.s.Sweep())
		got, ok = f.s.Lookup(y, "")
		require.True(t, ok)
		require.Equal(t, by, got)
		require.True(t, f.s.Forget(y, ""))
		require.False(t, f.s.Forget(x, ""))
		require.Zero(t, f.s.Len())
	}
}

// TestHugeTTL: the largest accepted TTL (about 292 years) neither overflows nor expires
// a binding early: no now+TTL sum is ever formed.
func TestHugeTTL(t *testing.T) {
	f := newFixture(t, affinity.Config{
		StickyTTLSeconds: affinity.TTLSeconds(affinity.MaxStickyTTLSeconds),
		Tiers: map[string]affinity.TierConfig{
			"short": {StickyTTLSeconds: affinity.TTLSeconds(1)},
		},
	})
	bs := backends(t, 4)
	b, _ := f.sel(t, "s", "", bs)
	_, _ = f.sel(t, "s", "short", bs)
	f.clk.Advance(200 * 365 * 24 * time.Hour)
	got, hit := f.sel(t, "s", "", bs)
	require.True(t, hit)
	require.Equal(t, b, got)
	_, hit = f.sel(t, "s", "short", bs)
	require.False(t, hit)
	require.Zero(t, f.s.Sweep())
	require.Equal(t, time.Duration(math.MaxInt64/int64(time.Second))*time.Second, f.s.Table().TTL(""))
	st := f.s.Stats()
	require.Equal(t, uint64(1), st.Expired)
	require.Equal(t, 2, st.Bindings)
}
