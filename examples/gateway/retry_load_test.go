package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/hrw"
)

// ranking returns ids in the HRW order of session (equal weights), best first.
func ranking(t *testing.T, session string, ids []string) []string {
	t.Helper()
	nodes := make([]hrw.Node, len(ids))
	for i, id := range ids {
		n, err := hrw.NewNode(id, 1)
		require.NoError(t, err)
		nodes[i] = n
	}
	var out []string
	for _, i := range hrw.Rank(hrw.KeyHash(session), nodes) {
		out = append(out, ids[i])
	}
	return out
}

// A retry that keeps the session's binding goes to the first backend of the session's HRW
// ranking (the failed one left out) that is under the balance bound when the scheduler's
// load block is on, and to the next backend in plain HRW order when it is off, whatever
// the loads. (Before: plain HRW order in both cases, so the retry joined the overloaded
// second choice.)
func TestRetryChoiceLoadAware(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	rank := ranking(t, "s1", ids)
	tests := []struct {
		name    string
		factor  float64       // affinity.load.balance_factor; 0: load awareness off
		waiting map[int]int64 // reported queue by ranking position (1: the second choice)
		want    int           // ranking position of the backend the retry goes to
	}{
		{"load off, nothing loaded: second choice", 0, nil, 1},
		{"load off, second choice overloaded: still the second", 0, map[int]int64{1: 100}, 1},
		{"load on, nothing loaded: second choice", 1.25, nil, 1},
		{"load on, second choice overloaded: the third", 1.25, map[int]int64{1: 100}, 2},
		{"load on, second and third overloaded: the fourth", 1.25, map[int]int64{1: 100, 2: 100}, 3},
		{"load on, all equally loaded (under the bound): the second", 1.25, map[int]int64{1: 1, 2: 1, 3: 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scripted{steps: []step{{err: errRefused}}} // counted (threshold 3): the binding stays
			cfg := gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)}}
			for _, id := range ids {
				cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: id, URL: "http://" + id + ".test"})
			}
			cfg.Affinity.Load.BalanceFactor = tt.factor
			g, err := gateway.New(cfg, gateway.WithTransport(rt))
			require.NoError(t, err)
			t.Cleanup(g.Close)
			for pos, n := range tt.waiting {
				require.NoError(t, g.Scheduler().ReportLoad(rank[pos], affinity.BackendLoad{Waiting: n}))
			}

			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			req.Header.Set("X-Session-ID", "s1")
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Len(t, rt.hosts, 2)
			assert.Equal(t, rank[0]+".test", rt.hosts[0], "the first attempt goes to the session's HRW winner")
			assert.Equal(t, rank[tt.want]+".test", rt.hosts[1], "the retry (ranking %v)", rank)
			assert.Equal(t, rank[tt.want], rec.Header().Get(gateway.HeaderBackend))
			bound, ok := g.Scheduler().Lookup("s1", "")
			require.True(t, ok)
			assert.Equal(t, rank[0], bound, "one failure: the binding stays")
			for _, id := range ids {
				assert.Zero(t, g.Scheduler().Load(id).Requests, "backend %s: every lease released", id)
			}
		})
	}
}

// A retry's bound is each backend's weighted share when the eligible backends' weights
// differ (affinity rule 15): with the failed first choice left out, a weight-3 second
// choice holding 2 queued requests (2 x 1024 tokens) against 1 on a weight-1 third is
// within its share (about 1.25 x 3075 x 3/4) and takes the retry, though over the
// unweighted mean (1.25 x 3075 / 2), where the retry went to the third before.
func TestRetryChoiceWeightedBound(t *testing.T) {
	ids := []string{"a", "b", "c"}
	weights := map[string]float64{"a": 3, "b": 1, "c": 1}
	nodes := make([]hrw.Node, len(ids))
	for i, id := range ids {
		n, err := hrw.NewNode(id, weights[id])
		require.NoError(t, err)
		nodes[i] = n
	}
	// A session whose weighted ranking puts a second.
	var session string
	var rank []string
	for i := 0; session == ""; i++ {
		s := fmt.Sprintf("s%d", i)
		order := hrw.Rank(hrw.KeyHash(s), nodes)
		if ids[order[1]] == "a" {
			session = s
			for _, j := range order {
				rank = append(rank, ids[j])
			}
		}
	}
	rt := &scripted{steps: []step{{err: errRefused}}}
	cfg := gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)}}
	for _, id := range ids {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: id, URL: "http://" + id + ".test", Weight: weights[id]})
	}
	cfg.Affinity.Load.BalanceFactor = 1.25
	g, err := gateway.New(cfg, gateway.WithTransport(rt))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	require.NoError(t, g.Scheduler().ReportLoad(rank[1], affinity.BackendLoad{Waiting: 2}))
	require.NoError(t, g.Scheduler().ReportLoad(rank[2], affinity.BackendLoad{Waiting: 1}))

	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("X-Session-ID", session)
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Len(t, rt.hosts, 2)
	assert.Equal(t, rank[0]+".test", rt.hosts[0], "the first attempt goes to the session's HRW winner")
	assert.Equal(t, "a.test", rt.hosts[1], "the retry stays within a's weighted share (ranking %v)", rank)
}
