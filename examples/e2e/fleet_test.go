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
func replicas(t *testing.T, n int) ([]*cluster, map[string]*backendServer) {
	t.Helper()
	srv := redistest.Start(t)
	backends := map[string]*backendServer{}
	cfg := gateway.Config{Store: &redisstore.Config{Address: srv.Addr(), Prefix: "e2e:" + t.Name() + ":"}}
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
	return cs, backends
}

// settle waits until every replica has received the invalidations published so far: the
// pause between two turns of an agent (seconds) is far longer than this delay (see the
// README for its measured bound).
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
	cs, _ := replicas(t, 2)
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
	// backend up).
	ss := make([]*session, sessions)
	bound := map[string]string{}
	hits, total = 0, 0
	for turn := 1; turn <= turns; turn++ {
		if turn == 4 {
			victim := bound[ss[0].id]
			moved := cs[0].gw.Scheduler().OnBackendDown(victim)
			require.Positive(t, moved)
			affected := 0
			for s := range ss {
				r := ss[s].turn(cs[0]) // the turn lands on the replica that saw the failure
				total++
				if bound[ss[s].id] == victim {
					require.False(t, r.hit)
					require.NotEqual(t, victim, r.backend)
					affected++
				} else {
					require.True(t, r.hit)
					hits++
				}
				bound[ss[s].id] = r.backend
			}
			settle(t, cs)
			t.Logf("failover on replica 0: %d of %d sessions moved", affected, sessions)
			continue
		}
		for s := range ss {
			if turn == 1 {
				ss[s] = newSession(fmt.Sprintf("failover-%02d", s))
			}
			r := ss[s].turn(cs[(s+turn)%2])
			total++
			if turn == 1 {
				bound[ss[s].id] = r.backend
				continue
			}
			require.True(t, r.hit, "session %d turn %d", s, turn)
			require.Equal(t, bound[ss[s].id], r.backend, "session %d turn %d: both replicas agree", s, turn)
			hits++
		}
	}
	t.Logf("two replicas, failover on one: hit rate %.1f %% (%d/%d)", 100*float64(hits)/float64(total), hits, total)
}
