package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// replicas starts n gateways over the same three fakevllm backends, sharing bindings on
// one real redis-server.
// retryAfter is the store's retry_after_seconds (0: the default, 1 s).
func replicas(t *testing.T, n int, retryAfter float64) ([]*cluster, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	backends := map[string]*backendServer{}
	cfg := gateway.Config{Store: &redisstore.Config{Address: srv.Addr(), Prefix: "e2e:" + t.Name() + ":", RetryAfterSeconds: retryAfter,
		TimeoutSeconds: 2}} // not the 50 ms default: these tests check sharing, and a loaded CI machine can exceed 50 ms
	for i := range 3 {
		b := startBackend(t, fmt.Sprintf("b%d", i+1))
		backends[b.id] = b
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: b.id, URL: b.url})
	}
	var cs []*cluster
	for range n {
		c := &cluster{t: t, backends: backends, recheck: make(chan time.Time)}
		cs = append(cs, c.start(cfg))
	}
	return cs, srv
}

// settle waits until every replica has received the invalidations published so far: the
// pause between two turns of an agent (seconds) is far longer than this delay (see
// docs/fleet.md, "Measured", for its measured bound).
func settle(t *testing.T, cs []*cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range cs {
		require.NoError(t, c.gw.Store().Sync(ctx))
	}
}

// TestTwoReplicasOneRedis: the load study's 12 sessions x 6 turns through two gateway
// replicas, each turn on the other replica than the previous one (a plain L4 balancer):
// 5/6 hit rate as with one replica. Then 12 more sessions, with a backend failover
// delivered to one replica only after turn 3: the sessions on that backend move once
// (one miss each) and both replicas keep them on the new backend.
func TestTwoReplicasOneRedis(t *testing.T) {
	cs, _ := replicas(t, 2, 0)
	const sessions, turns = 12, 6

	hits, total := 0, 0
	for s := range sessions {
		sess := newSession(fmt.Sprintf("fleet-%02d", s))
		var first string
		for turn := 1; turn <= turns; turn++ {
			r := sess.turn(cs[(s+turn)%2])
			total++
			if turn == 1 {
				require.False(t, r.hit)
				first = r.backend
				continue
			}
			require.True(t, r.hit, "session %d turn %d", s, turn)
			require.Equal(t, first, r.backend)
			require.Positive(t, r.cached, "turn %d reuses the backend's prefix cache", turn)
			hits++
		}
	}
	require.Equal(t, 5*total, 6*hits, "hit rate %d/%d", hits, total)
	var h, m float64
	for _, c := range cs {
		mf := c.metrics()
		h += counter(mf, "agentserve_affinity_hits_total", nil)
		m += counter(mf, "agentserve_affinity_misses_total", nil)
		require.Zero(t, counter(mf, "agentserve_affinity_store_errors_total", nil))
	}
	require.Equal(t, float64(sessions*(turns-1)), h, "hits summed over both replicas' /metrics")
	require.Equal(t, float64(sessions), m, "misses summed over both replicas' /metrics")
	t.Logf("two replicas, alternating: hit rate %.1f %% (%d/%d)", 100*h/(h+m), int(h), int(h+m))

	// Failover seen by replica 0 only (its health checker; replica 1 still sees the
	// backend up) after turn 3 of 12 new sessions: the sessions on that backend move
	// once (one miss each) and both replicas keep them on the new backend.
	hits, total, affected := failoverStudy(t, cs, "failover")
	require.Positive(t, affected)
	require.Equal(t, sessions*(turns-1)-affected, hits, "one extra miss per moved session, nothing else")
	t.Logf("two replicas, failover on one: hit rate %.1f %% (%d/%d)", 100*float64(hits)/float64(total), hits, total)
}

// TestTwoReplicasWithoutStore is the control: the same failover study with bindings
// local to each replica. A session moved by replica 0 goes back to the failed-over
// backend on replica 1 (healthy in its view) and forth again: every turn is a miss.
func TestTwoReplicasWithoutStore(t *testing.T) {
	backends := map[string]*backendServer{}
	var cfg gateway.Config
	for i := range 3 {
		b := startBackend(t, fmt.Sprintf("b%d", i+1))
		backends[b.id] = b
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: b.id, URL: b.url})
	}
	var cs []*cluster
	for range 2 {
		c := &cluster{t: t, backends: backends, recheck: make(chan time.Time)}
		cs = append(cs, c.start(cfg))
	}
	hits, total, affected := failoverStudy(t, cs, "failover")
	require.Positive(t, affected)
	require.Less(t, hits, 12*5-affected, "without the store the moved sessions keep missing")
	t.Logf("two replicas without store, failover on one: hit rate %.1f %% (%d/%d)", 100*float64(hits)/float64(total), hits, total)
}

// failoverStudy runs 12 sessions x 6 turns alternating between replicas 0 and 1; before
// turn 4 replica 0 alone is told that the backend of the first session is down, and turn
// 4 of every session goes to replica 0. With a store it requires that every turn but the
// first and the moving one is a hit on the session's current backend. It returns the
// hits, the turns and how many sessions were on the failed backend.
func failoverStudy(t *testing.T, cs []*cluster, prefix string) (hits, total, affected int) {
	t.Helper()
	const sessions, turns = 12, 6
	shared := cs[0].gw.Store() != nil
	reused := 0
	ss := make([]*session, sessions)
	bound := map[string]string{}
	for turn := 1; turn <= turns; turn++ {
		if turn == 4 {
			victim := bound[ss[0].id]
			require.Positive(t, cs[0].gw.Scheduler().OnBackendDown(victim))
		}
		for s := range ss {
			if turn == 1 {
				ss[s] = newSession(fmt.Sprintf("%s-%02d", prefix, s))
			}
			replica := (s + turn) % 2
			if turn == 4 {
				replica = 0 // the replica that saw the failure
			}
			r := ss[s].turn(cs[replica])
			total++
			if r.hit {
				hits++
			}
			if turn > 1 && r.backend == bound[ss[s].id] {
				reused++ // same backend as the previous turn: its prefix cache is warm
			}
			switch {
			case turn == 1:
			case turn == 4 && r.backend != bound[ss[s].id]:
				affected++
				require.False(t, r.hit)
			case shared:
				require.True(t, r.hit, "session %d turn %d", s, turn)
				require.Equal(t, bound[ss[s].id], r.backend, "session %d turn %d: both replicas agree", s, turn)
			}
			bound[ss[s].id] = r.backend
		}
		if shared {
			settle(t, cs)
		}
	}
	t.Logf("store %v, failover on replica 0: %d of %d sessions moved; %d/%d turns on the previous turn's backend",
		shared, affected, sessions, reused, total)
	if shared {
		require.Equal(t, hits, reused, "with the store, the hit flag is exactly cache reuse")
	}
	return hits, total, affected
}

// TestReplicasWhileRedisDown: Redis dies between turns; both replicas keep serving every
// request (hits from their own tables, new sessions placed locally), count the store
// errors on /metrics, and share bindings again once it is back.
func TestReplicasWhileRedisDown(t *testing.T) {
	cs, srv := replicas(t, 2, 0)
	old := newSession("before-outage")
	first := old.turn(cs[0]).backend
	require.Equal(t, first, old.turn(cs[1]).backend)

	srv.Stop()
	for turn := range 4 {
		r := old.turn(cs[turn%2]) // asserts 200
		require.True(t, r.hit)
		require.Equal(t, first, r.backend)
	}
	fresh := newSession("during-outage")
	r := fresh.turn(cs[0])
	require.False(t, r.hit)
	var errs float64
	for _, c := range cs {
		errs += counter(c.metrics(), "agentserve_affinity_store_errors_total", nil)
	}
	require.Positive(t, errs, "agentserve_affinity_store_errors_total")

	srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, c := range cs {
		require.NoError(t, c.gw.Store().Ping(ctx))
		c.clock.Advance(time.Second) // past retry_after_seconds (on the gateways' clock)
		// Each connection pooled before the restart may fail once (counted, decided
		// locally; the pool can hold more than one); after the retry interval the next
		// call takes another. Warm up until a turn adds no error: the pool must be
		// clean within a few turns.
		clean := false
		for w := 0; w < 8 && !clean; w++ {
			before := c.gw.Scheduler().StoreErrors()
			newSession(fmt.Sprintf("warm-up-%d-%d", i, w)).turn(c)
			clean = c.gw.Scheduler().StoreErrors() == before
			c.clock.Advance(time.Second)
		}
		require.True(t, clean, "replica %d still failing store calls after the restart", i)
	}
	errs0 := cs[0].gw.Scheduler().StoreErrors() + cs[1].gw.Scheduler().StoreErrors()
	s := newSession("after-outage")
	a := s.turn(cs[0])
	b := s.turn(cs[1])
	require.False(t, a.hit)
	require.True(t, b.hit, "the binding made on replica 0 is shared again")
	require.Equal(t, a.backend, b.backend)
	require.Equal(t, errs0, cs[0].gw.Scheduler().StoreErrors()+cs[1].gw.Scheduler().StoreErrors())
}

// TestReplicaReloadKeepsStore: an affinity change reloaded on one replica builds a new
// Scheduler on the same store: its bindings were copied, and a move made by the other
// replica still reaches it. A change of the store block itself needs a restart.
func TestReplicaReloadKeepsStore(t *testing.T) {
	cs, _ := replicas(t, 2, 0)
	s := newSession("reload")
	first := s.turn(cs[0]).backend
	require.True(t, s.turn(cs[1]).hit)

	cfg := cs[1].gw.Config()
	oldSched := cs[1].gw.Scheduler()
	cfg.Affinity.StickyTTLSeconds = affinityTTL(3600)
	require.NoError(t, cs[1].gw.Reload(cfg))
	require.NotSame(t, oldSched, cs[1].gw.Scheduler(), "an affinity change builds a new Scheduler")
	r := s.turn(cs[1])
	require.True(t, r.hit)
	require.Equal(t, first, r.backend)

	require.Positive(t, cs[0].gw.Scheduler().OnBackendDown(first))
	moved := s.turn(cs[0]).backend
	require.NotEqual(t, first, moved)
	settle(t, cs)
	r = s.turn(cs[1])
	require.True(t, r.hit, "the new Scheduler got the invalidation")
	require.Equal(t, moved, r.backend)

	cfg.Store = &redisstore.Config{Address: cfg.Store.Address, Prefix: "elsewhere:"}
	require.ErrorIs(t, cs[1].gw.Reload(cfg), gateway.ErrReloadNeedsRestart)
}

func affinityTTL(n int64) *int64 { return &n }
