package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// TestLeasesReleased: 1,000 requests over 40 sessions from 8 clients, a fifth of them
// without a session (leased all the same: LeaseBackend), JSON and SSE (with and without
// usage), a quarter of them cancelled by the client at a random point, while one backend
// is killed (the requests that meet it are retried elsewhere, or cut mid-body) and later
// restarted. Afterwards every backend's outstanding load is back to 0, in the scheduler
// and in the gateway's gauges; the reported usage reached the reuse counters.
func TestLeasesReleased(t *testing.T) {
	c := newCluster(t, 3, func(cfg *gateway.Config) {
		cfg.Affinity.Load = affinity.LoadConfig{BalanceFactor: 1.25, SpillCostWeight: affinity.SpillWeight(8)}
	})
	const clients, perClient = 8, 125
	var n leaseCounts // this run's (a package variable summed over -count runs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	killed := false
	victim := c.backends["b2"]
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perClient {
				if w == 0 && i == perClient/3 {
					mu.Lock()
					victim.kill()
					killed = true
					mu.Unlock()
				}
				if w == 0 && i == 2*perClient/3 {
					mu.Lock()
					victim.restart(t)
					mu.Unlock()
					c.gw.RecheckPassive(context.Background())
				}
				id := fmt.Sprintf("sess-%d", rng.IntN(40))
				if rng.IntN(5) == 0 {
					id = "" // no session: hashed by a random key, leased without a binding
				} else {
					n.withSession.Add(1)
				}
				leaseRequest(t, c, rng, id, &n)
			}
		}()
	}
	wg.Wait()
	require.True(t, killed)
	assert.Less(t, n.failed.Load(), int64(clients*perClient/20), "few requests fail, only around the kill")
	t.Logf("502s or cut by the kill: %d", n.failed.Load())
	c.ts.Close() // waits for every handler, cancelled ones included

	for id := range c.backends {
		assert.Equal(t, affinity.LoadSnapshot{}, c.gw.Scheduler().Load(id), "backend %s", id)
	}
	mfs, err := c.gw.Registry().Gather()
	require.NoError(t, err)
	seen := 0
	for _, mf := range mfs {
		if mf.GetName() == gateway.MetricOutstandingRequests || mf.GetName() == gateway.MetricOutstandingCost {
			for _, m := range mf.GetMetric() {
				seen++
				assert.Zero(t, m.GetGauge().GetValue(), "%s %v", mf.GetName(), m.GetLabel())
			}
		}
	}
	assert.Equal(t, 2*len(c.backends), seen, "one gauge per configured backend and metric")
	st := c.gw.Scheduler().Stats()
	assert.GreaterOrEqual(t, st.Hits+st.Misses, uint64(n.withSession.Load()*3/4), "requests with a session were placed through leases")
	assert.Positive(t, st.Broken.Total(), "the killed backend's bindings broke")
	r := c.gw.Scheduler().Reuse("")
	assert.Positive(t, r.PromptTokens, "usage from JSON and SSE responses reached Done")
	assert.Positive(t, r.CachedPromptTokens)
}

// leaseRequest sends one chat request of session id ("": without a session): JSON or
// SSE, maybe cancelled; a request the kill failed counts in n.failed.
func leaseRequest(t *testing.T, c *cluster, rng *rand.Rand, id string, n *leaseCounts) {
	stream := rng.IntN(2) == 0
	body := map[string]any{"model": "fake-model", "max_tokens": 8,
		"messages": []msg{{Role: "system", Content: "rules for " + id + string(bytes.Repeat([]byte(" tools"), 200))},
			{Role: "user", Content: fmt.Sprintf("question %d", rng.IntN(3))}}}
	if stream {
		body["stream"] = true
		if rng.IntN(4) > 0 {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	data, err := json.Marshal(body)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelAt := -1 // bytes read before the client gives up; -1: never
	if rng.IntN(4) == 0 {
		cancelAt = rng.IntN(64)
		if cancelAt == 0 {
			cancel() // before sending
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions", bytes.NewReader(data))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Session-ID", id)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		require.Error(t, ctx.Err(), "only a cancelled request may fail: %v", err)
		return
	}
	defer resp.Body.Close()
	if cancelAt > 0 {
		_, _ = io.CopyN(io.Discard, resp.Body, int64(cancelAt))
		cancel()
		return
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if errors.Is(err, io.ErrUnexpectedEOF) && resp.StatusCode == http.StatusOK {
		// A response the kill cut after its first bytes: the gateway cannot replay it
		// and ends the client's body early, as it must (its lease is released all the same).
		n.failed.Add(1)
		return
	}
	require.NoError(t, err)
	if resp.StatusCode == http.StatusBadGateway { // a request caught by the kill itself
		n.failed.Add(1)
		return
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	if id == "" {
		require.Empty(t, resp.Header.Values(gateway.HeaderOutcome), "no outcome without a session")
		return
	}
	require.Contains(t, []string{"hit", "miss", "rebind", "spill"}, resp.Header.Get(gateway.HeaderOutcome))
}

// leaseCounts are TestLeasesReleased's counts of one run.
type leaseCounts struct {
	withSession atomic.Int64 // requests sent with a session
	failed      atomic.Int64 // requests answered 502 or cut mid-body by the kill (their leases are released all the same)
}
