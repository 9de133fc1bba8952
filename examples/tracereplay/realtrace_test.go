package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// realTracePath is the Mooncake conversation trace relative to this package's directory
// (examples/tracereplay/): the project's sibling shared/ directory.
const realTracePath = "../../../shared/traces/mooncake_conversation_trace.jsonl"

var realTrace struct {
	once sync.Once
	tr   *Trace
	err  error
}

// loadRealTrace reads the real trace once per test binary. Where the file is absent the
// test fails under CI=true and is skipped otherwise.
func loadRealTrace(t *testing.T) *Trace {
	t.Helper()
	if _, err := os.Stat(realTracePath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the real trace is missing: %v", err)
		}
		t.Skipf("real trace not available: %v", err)
	}
	realTrace.once.Do(func() {
		f, err := os.Open(realTracePath)
		if err != nil {
			realTrace.err = err
			return
		}
		defer f.Close()
		realTrace.tr, realTrace.err = ReadTrace(f)
	})
	require.NoError(t, realTrace.err)
	return realTrace.tr
}

// TestRealTraceFacts checks the reader against the facts listed in the trace's README.
func TestRealTraceFacts(t *testing.T) {
	tr := loadRealTrace(t)
	require.Empty(t, tr.Skipped)
	f := ComputeFacts(tr.Requests)
	assert.Equal(t, 12031, f.Requests)
	assert.Equal(t, 182790, f.DistinctBlocks)
	assert.InDelta(t, 37.4, 100*f.IdealHitRatio, 0.05, "ideal prefix hit ratio %.3f %%", 100*f.IdealHitRatio)
	assert.InDelta(t, 59.0, float64(f.Duration)/60000, 1.0, "about one hour")
	for i := range tr.Requests {
		require.Equal(t, int64(0), tr.Requests[i].Blocks[0], "request %d starts with block 0", i)
	}

	global := GlobalPrefix(tr.Requests)
	assert.Equal(t, []int64{0}, global)
	s := ReconstructSessions(tr.Requests, global)
	// README: about 7,400 sessions, ~39 % continuing turns. Exact values of our rule:
	assert.Equal(t, 7401, s.Count)
	assert.Equal(t, 4630, s.Continuing)
	assert.InDelta(t, 7400, s.Count, 100)
	assert.InDelta(t, 0.39, float64(s.Continuing)/float64(f.Requests), 0.01)
}

// TestRealTraceSchedulerVsReference: at N = 8 with 20 % of the distinct blocks spread
// over the backends, the Scheduler reaches >= 95 % of the cache-aware reference's prefix
// hit ratio and >= 3x the random policy's. Three replays take ~0.2 s (~3 s under -race).
func TestRealTraceSchedulerVsReference(t *testing.T) {
	reqs, f, global, s, ids := prepareRealTrace(t)
	const n = 8
	cfg := ReplayConfig{Backends: n, CacheBlocks: int(0.2 * float64(f.DistinctBlocks) / n), Model: DefaultModel}
	pc := PolicyConfig{Backends: n, Seed: 1, TTL: 30 * time.Minute, Global: global}
	hit := map[string]float64{}
	for _, name := range []string{"random", "scheduler", "cache-aware"} {
		p, err := NewPolicy(name, pc)
		require.NoError(t, err)
		res, err := Replay(reqs, s, ids, p, cfg, nil)
		require.NoError(t, err)
		hit[name] = res.HitRatio()
		t.Logf("%-12s prefix hit %.2f %%", name, 100*res.HitRatio())
	}
	assert.GreaterOrEqual(t, hit["scheduler"], 0.95*hit["cache-aware"],
		"scheduler %.2f %% vs cache-aware %.2f %%", 100*hit["scheduler"], 100*hit["cache-aware"])
	assert.GreaterOrEqual(t, hit["scheduler"], 3*hit["random"],
		"scheduler %.2f %% vs random %.2f %%", 100*hit["scheduler"], 100*hit["random"])
}

// TestRealTraceLoadAwareGoal: issue #8's goal at N = 8 with 20 % of the distinct blocks:
// the load-aware policy (the real Scheduler through leases, default values) keeps >= 97 %
// of the cache-aware reference's prefix hit ratio AND a p99 latency <= least-loaded's, in
// the same run; every lease is released at the end.
func TestRealTraceLoadAwareGoal(t *testing.T) {
	reqs, f, global, s, ids := prepareRealTrace(t)
	const n = 8
	cfg := ReplayConfig{Backends: n, CacheBlocks: int(0.2 * float64(f.DistinctBlocks) / n), Model: DefaultModel}
	pc := PolicyConfig{Backends: n, Seed: 1, TTL: 30 * time.Minute, Global: global}
	var results []*Result
	var lp *leasePolicy
	for _, name := range []string{"least-loaded", "cache-aware", "load-aware"} {
		p, err := NewPolicy(name, pc)
		require.NoError(t, err)
		if l, ok := p.(*leasePolicy); ok {
			lp = l
		}
		res, err := Replay(reqs, s, ids, p, cfg, nil)
		require.NoError(t, err)
		results = append(results, res)
	}
	rows := Rows(results, n, cfg.CacheBlocks)
	la := rows[2]
	t.Logf("load-aware: prefix hit %.2f %% (%.1f %% of cache-aware), p99 %v (%.2fx least-loaded), %d spills",
		100*la.HitRatio(), 100*la.VsCacheAware, la.P99, la.P99VsLeastLd, lp.spills)
	assert.GreaterOrEqual(t, la.VsCacheAware, 0.97, "prefix hit vs cache-aware")
	assert.LessOrEqual(t, la.P99VsLeastLd, 1.0, "p99 vs least-loaded")
	assert.Positive(t, lp.spills, "spills exercised")

	require.NotNil(t, lp)
	lp.finish()
	for i := range n {
		assert.Equal(t, affinity.LoadSnapshot{}, lp.sched.Load(BackendID(i)), "backend %d: every lease released", i)
	}
}

// TestRealTraceLoadAwareGoalSmallCache: issue #8's goal with caches of 5 % of the distinct
// blocks (the README's -cache-blocks 2284, 1142 and 571) at N = 4, 8 and 16, where the
// default load-aware policy (RecommendedLoad: the drain model with cache retention and
// prefix survival) meets it in the same run.
func TestRealTraceLoadAwareGoalSmallCache(t *testing.T) {
	reqs, f, global, s, ids := prepareRealTrace(t)
	for _, n := range []int{4, 8, 16} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			cfg := ReplayConfig{Backends: n, CacheBlocks: int(0.05 * float64(f.DistinctBlocks) / float64(n)), Model: DefaultModel}
			pc := PolicyConfig{Backends: n, Seed: 1, TTL: 30 * time.Minute, Global: global}
			var results []*Result
			for _, name := range []string{"least-loaded", "cache-aware", "load-aware"} {
				p, err := NewPolicy(name, pc)
				require.NoError(t, err)
				res, err := Replay(reqs, s, ids, p, cfg, nil)
				require.NoError(t, err)
				results = append(results, res)
			}
			la := Rows(results, n, cfg.CacheBlocks)[2]
			t.Logf("N=%d, %d blocks: load-aware prefix hit %.1f %% of cache-aware, p99 %.3fx least-loaded",
				n, cfg.CacheBlocks, 100*la.VsCacheAware, la.P99VsLeastLd)
			assert.GreaterOrEqual(t, la.VsCacheAware, 0.97, "prefix hit vs cache-aware")
			assert.LessOrEqual(t, la.P99VsLeastLd, 1.0, "p99 vs least-loaded")
		})
	}
}

// prepareRealTrace loads the real trace (see loadRealTrace) and derives what a replay
// needs: its requests, their facts, the global prefix, the sessions and their IDs.
func prepareRealTrace(t *testing.T) ([]Request, Facts, []int64, *Sessions, []string) {
	t.Helper()
	tr := loadRealTrace(t)
	reqs := tr.Requests
	global := GlobalPrefix(reqs)
	s := ReconstructSessions(reqs, global)
	return reqs, ComputeFacts(reqs), global, s, SessionIDs(s)
}
