package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// A backend killed mid-study: its sessions rebind on their next turn (passive health
// check + retry once), the broken bindings are counted with reason "down", no request
// is lost; after it answers /health again it is back for new sessions, and moved
// sessions do not fail back.
//
// One-strike ejection (consecutive_connect_failures: 1) keeps this test about rebinding;
// TestOutlierThreshold covers the default streak.
func TestBackendKilledMidStudy(t *testing.T) {
	c := newCluster(t, 3, func(cfg *gateway.Config) { cfg.OutlierDetection.ConsecutiveConnectFailures = 1 })
	var sess []*session
	bound := map[string]string{}
	for i := range 12 {
		s := newSession(fmt.Sprintf("kill-%02d", i))
		sess = append(sess, s)
		for range 3 {
			bound[s.id] = s.turn(c).backend
		}
	}
	victim := bound[sess[0].id]
	affected := 0
	for _, b := range bound {
		if b == victim {
			affected++
		}
	}
	c.killBackend(victim)

	for turn := 4; turn <= 6; turn++ {
		for _, s := range sess {
			r := s.turn(c) // asserts 200: nothing lost
			assert.NotEqual(t, victim, r.backend)
			switch {
			case bound[s.id] != victim:
				assert.True(t, r.hit, "%s turn %d: untouched session keeps its binding", s.id, turn)
				assert.Equal(t, bound[s.id], r.backend)
			case turn == 4:
				assert.False(t, r.hit, "%s: rebinding turn is a miss", s.id)
			default:
				assert.True(t, r.hit, "%s turn %d: hit on the new backend", s.id, turn)
			}
			assert.Equal(t, r.meta.Backend, r.backend)
		}
		if turn == 4 {
			for _, s := range sess {
				if b, ok := c.gw.Scheduler().Lookup(s.id, ""); assert.True(t, ok) {
					bound[s.id] = b
				}
			}
		}
	}
	mf := c.metrics()
	assert.Equal(t, float64(affected), counter(mf, "agentserve_affinity_broken_total", map[string]string{"reason": "down"}))
	assert.Equal(t, float64(12+affected), counter(mf, "agentserve_affinity_misses_total", nil))
	// The one request that found the backend dead was first counted as a hit (its binding
	// was still valid) and then, on the retry, as a miss; sequential turns mean exactly one.
	assert.Equal(t, float64(12*5-affected+1), counter(mf, "agentserve_affinity_hits_total", nil))
	assert.Equal(t, []string{victim}, c.gw.PassivelyDown())
	assert.Equal(t, health.Down, c.gw.Scheduler().Health().State(victim))

	// Ejected for base_ejection_seconds (30 s): before that no re-check happens; after it,
	// a backend still failing its health check stays ejected.
	assert.Empty(t, c.gw.RecheckPassive(context.Background()))
	c.clock.Advance(30 * time.Second)
	assert.Empty(t, c.gw.RecheckPassive(context.Background()))
	c.backends[victim].restart(t)
	assert.Equal(t, []string{victim}, c.gw.RecheckPassive(context.Background()))
	assert.Empty(t, c.gw.PassivelyDown())
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State(victim))

	for _, s := range sess { // no failback
		r := s.turn(c)
		assert.True(t, r.hit)
		assert.Equal(t, bound[s.id], r.backend)
	}
	landed := false
	for i := 0; i < 64 && !landed; i++ { // new sessions can land on it again
		landed = newSession(fmt.Sprintf("new-%02d", i)).turn(c).backend == victim
	}
	assert.True(t, landed, "a new session lands on the recovered backend")
}

// With retry_on_connect_error: false the request that hits the dead backend fails with
// a JSON 502; the backend is marked down all the same and the next turn rebinds.
func TestKilledBackendWithoutRetry(t *testing.T) {
	c := newCluster(t, 2, func(cfg *gateway.Config) {
		cfg.RetryOnConnectError = new(bool)
		cfg.OutlierDetection.ConsecutiveConnectFailures = 1
	})
	s := newSession("no-retry")
	victim := s.turn(c).backend
	c.killBackend(victim)

	s.msgs = append(s.msgs, msg{Role: "user", Content: "again"})
	r := c.chat(s.id, s.msgs)
	assert.Equal(t, http.StatusBadGateway, r.status)
	code, _ := errorCode(t, r.body)
	assert.Equal(t, "backend_unavailable", code)
	assert.Equal(t, victim, r.backend)

	r = c.chat(s.id, s.msgs)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.NotEqual(t, victim, r.backend)
	assert.False(t, r.hit)
}

// The active prober drives the scheduler: a backend failing /health goes Down, its
// bindings are dropped at once (broken, reason down: the session's next turn is a miss
// placed elsewhere), and it comes back Healthy.
func TestActiveHealthCheck(t *testing.T) {
	c := newCluster(t, 3, func(cfg *gateway.Config) {
		cfg.Health.Enabled = new(true)
		cfg.Health.FailureThreshold = 1
		cfg.Health.SuccessThreshold = 1
	})
	ctx := context.Background()
	s := newSession("active")
	victim := s.turn(c).backend
	c.backends[victim].sim.SetHealthy(false)
	c.gw.ProbeOnce(ctx)
	require.Equal(t, health.Down, c.gw.Scheduler().Health().State(victim))

	r := s.turn(c)
	assert.NotEqual(t, victim, r.backend)
	assert.False(t, r.hit)
	assert.Equal(t, 1.0, counter(c.metrics(), "agentserve_affinity_broken_total", map[string]string{"reason": "down"}))

	c.backends[victim].sim.SetHealthy(true)
	c.gw.ProbeOnce(ctx)
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State(victim))
	r2 := s.turn(c)
	assert.True(t, r2.hit, "no failback")
	assert.Equal(t, r.backend, r2.backend)
}
