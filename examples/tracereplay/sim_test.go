package main

import (
	"strings"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handTrace is a 7-request trace small enough to replay by hand (block 0 is the global
// system prompt; a partial last block differs from the next turn's block at that index):
//
//	r0 t=0s  A  [0 1 2]        1100 tok  (blocks 512 512 76)
//	r1 t=1s  B  [0 3 4]        1100 tok
//	r2 t=2s  A  [0 1 5 6]      1600 tok, 3000 output tokens
//	r3 t=3s  C  [0 7]           600 tok  (only block 0 is full: a new session)
//	r4 t=4s  B  [0 3 8 9]      1600 tok
//	r5 t=5s  A  [0 1 5 10 11]  2100 tok
//	r6 t=6s  A  [0 1 12]       1100 tok  (a branch: the latest request holding block 1 is r5)
const handTrace = `{"timestamp": 0, "input_length": 1100, "output_length": 0, "hash_ids": [0, 1, 2]}
{"timestamp": 1000, "input_length": 1100, "output_length": 0, "hash_ids": [0, 3, 4]}
{"timestamp": 2000, "input_length": 1600, "output_length": 3000, "hash_ids": [0, 1, 5, 6]}
{"timestamp": 3000, "input_length": 600, "output_length": 0, "hash_ids": [0, 7]}
{"timestamp": 4000, "input_length": 1600, "output_length": 0, "hash_ids": [0, 3, 8, 9]}
{"timestamp": 5000, "input_length": 2100, "output_length": 0, "hash_ids": [0, 1, 5, 10, 11]}
{"timestamp": 6000, "input_length": 1100, "output_length": 0, "hash_ids": [0, 1, 12]}
`

// r7 t=7s B [0 3 8 13 14] 2100 tok: B returns after the outage of the outage test.
const handTraceR7 = `{"timestamp": 7000, "input_length": 2100, "output_length": 0, "hash_ids": [0, 3, 8, 13, 14]}
`

// handModel makes service time = 1 ms per uncached prompt token + 1 ms per output token.
var handModel = ServiceModel{PrefillPerToken: time.Millisecond, DecodePerToken: time.Millisecond}

const ms = time.Millisecond

func readHand(t *testing.T, in string) ([]Request, *Sessions, []string) {
	t.Helper()
	tr, err := ReadTrace(strings.NewReader(in))
	require.NoError(t, err)
	require.Empty(t, tr.Skipped)
	global := GlobalPrefix(tr.Requests)
	s := ReconstructSessions(tr.Requests, global)
	return tr.Requests, s, SessionIDs(s)
}

func TestSessionRuleHandTrace(t *testing.T) {
	reqs, s, ids := readHand(t, handTrace)
	assert.Equal(t, []int64{0}, GlobalPrefix(reqs))
	assert.Equal(t, []int{0, 1, 0, 2, 1, 0, 0}, s.Of)
	assert.Equal(t, []int{-1, -1, 0, -1, 1, 2, 5}, s.Prev)
	assert.Equal(t, 3, s.Count)
	assert.Equal(t, 4, s.Continuing)
	assert.Equal(t, []string{"s0", "s1", "s0", "s2", "s1", "s0", "s0"}, ids)
	assert.Equal(t, 4, s.MaxTurns())
	h := s.TurnsHistogram()
	assert.Equal(t, HistogramBucket{"1", 1, 1}, h[0])
	assert.Equal(t, HistogramBucket{"2", 1, 2}, h[1])
	assert.Equal(t, HistogramBucket{"4", 1, 4}, h[3])

	f := ComputeFacts(reqs)
	assert.Equal(t, 7, f.Requests)
	assert.Equal(t, 13, f.DistinctBlocks)
	assert.Equal(t, int64(9200), f.InputTokens)
	// One infinite cache: r2 reuses 1024, r3 512, r4 1024, r5 1536, r6 1024, r1 512.
	assert.InDelta(t, 5632.0/9200, f.IdealHitRatio, 1e-12)
}

func TestSessionRuleDetails(t *testing.T) {
	mk := func(ts int64, in int, blocks ...int64) Request {
		return Request{Timestamp: ts, InputTokens: in, Blocks: blocks}
	}
	t.Run("partial block does not join", func(t *testing.T) {
		// r1 shares r0's last block 5, but it is partial in r0 (and r1): no full block shared.
		reqs := []Request{mk(0, 600, 0, 5), mk(1, 600, 0, 5)}
		s := ReconstructSessions(reqs, []int64{0})
		assert.Equal(t, []int{0, 1}, s.Of)
	})
	t.Run("global prefix does not join", func(t *testing.T) {
		reqs := []Request{mk(0, 1024, 0, 1), mk(1, 1024, 0, 2)}
		assert.Equal(t, []int{0, 1}, ReconstructSessions(reqs, []int64{0}).Of)
		assert.Equal(t, []int{0, 0}, ReconstructSessions(reqs, nil).Of)
	})
	t.Run("joins the latest sharing request", func(t *testing.T) {
		// r1 joins r0 (shares 1); r2 opens s1 (shares nothing) …; r3 shares block 1
		// with r0 and r1: it joins r1's session and its previous turn is r1.
		reqs := []Request{mk(0, 1024, 0, 1), mk(1, 1536, 0, 1, 2), mk(2, 1024, 0, 3), mk(3, 1536, 0, 1, 4)}
		s := ReconstructSessions(reqs, []int64{0})
		assert.Equal(t, []int{0, 0, 1, 0}, s.Of)
		assert.Equal(t, []int{-1, 0, -1, 1}, s.Prev)
	})
	t.Run("global prefix needs 90 percent", func(t *testing.T) {
		var reqs []Request
		for i := range 10 {
			b := int64(100 + i)
			if i < 9 {
				b = 1 // 9 of 10 requests continue with block 1
			}
			reqs = append(reqs, mk(int64(i), 1500, 0, b, int64(200+i)))
		}
		assert.Equal(t, []int64{0, 1}, GlobalPrefix(reqs))
		reqs[8].Blocks[1] = 99 // now 8 of 10
		assert.Equal(t, []int64{0}, GlobalPrefix(reqs))
		assert.Empty(t, GlobalPrefix(nil))
	})
}

func TestPrefixCache(t *testing.T) {
	c := newPrefixCache(4)
	assert.Equal(t, 0, c.Access([]int64{0, 1, 2}))
	assert.Equal(t, 3, c.Peek([]int64{0, 1, 2, 9}))
	assert.Equal(t, 1, c.Peek([]int64{0, 9, 2}), "prefix semantics: cached block 2 after a missing block 9 is not reused")
	// LRU order now (most recent first): 0 1 2. Add 0 3 4: 0 3 4 1 2 -> evicts 2.
	assert.Equal(t, 1, c.Access([]int64{0, 3, 4}))
	assert.Equal(t, 4, c.Len())
	assert.Equal(t, 2, c.Peek([]int64{0, 1, 2}), "the tail block 2 was evicted first")
	// A request longer than the capacity keeps its head.
	assert.Equal(t, 1, c.Access([]int64{0, 5, 6, 7, 8, 9}))
	assert.Equal(t, 4, c.Peek([]int64{0, 5, 6, 7, 8, 9}))
	assert.Equal(t, 4, c.Len())
	c.Reset()
	assert.Equal(t, 0, c.Len())
	assert.Equal(t, 0, c.Peek([]int64{0}))
	assert.Equal(t, 0, c.Access([]int64{0, 1}))
	assert.Equal(t, 2, c.Peek([]int64{0, 1}))

	zero := newPrefixCache(0)
	assert.Equal(t, 0, zero.Access([]int64{0, 1}))
	assert.Equal(t, 0, zero.Peek([]int64{0}))
}

type handWant struct {
	routes      []int
	reused      int64
	same        int
	work        []time.Duration
	p50, p99    time.Duration
	hits        int // -1: policy does not report hits
	affinityPct float64
}

// routeRecorder wraps a policy and records its decisions.
type routeRecorder struct {
	Policy
	routes []int
}

func (r *routeRecorder) Route(t Turn, c *Cluster) (Decision, error) {
	d, err := r.Policy.Route(t, c)
	r.routes = append(r.routes, d.Backend)
	return d, err
}

// BackendDown/Up forward to the wrapped policy when it listens.
func (r *routeRecorder) BackendDown(i int, now time.Duration) {
	if l, ok := r.Policy.(healthListener); ok {
		l.BackendDown(i, now)
	}
}

func (r *routeRecorder) BackendUp(i int, now time.Duration) {
	if l, ok := r.Policy.(healthListener); ok {
		l.BackendUp(i, now)
	}
}

func replayHand(t *testing.T, in, policy string, pc PolicyConfig, events []Event) (*Result, []int) {
	t.Helper()
	reqs, s, ids := readHand(t, in)
	pc.Backends, pc.Global = 2, GlobalPrefix(reqs)
	if pc.TTL == 0 {
		pc.TTL = 30 * time.Minute
	}
	p, err := NewPolicy(policy, pc)
	require.NoError(t, err)
	rec := &routeRecorder{Policy: p}
	res, err := Replay(reqs, s, ids, rec, ReplayConfig{Backends: 2, CacheBlocks: 100, Model: handModel, Events: events}, nil)
	require.NoError(t, err)
	return res, rec.routes
}

// TestPoliciesHandTrace checks every deterministic policy against a replay done by hand
// (N = 2, caches large enough never to evict, service = uncached tokens + output tokens
// in ms). HRW places s0 (A) and s1 (B) on backend-0 and s2 (C) on backend-1; the test
// pins that placement through the hrw package before relying on it.
func TestPoliciesHandTrace(t *testing.T) {
	n0, _ := hrw.NewNode("backend-0", 1)
	n1, _ := hrw.NewNode("backend-1", 1)
	nodes := []hrw.Node{n0, n1}
	for sid, want := range map[string]int{"s0": 0, "s1": 0, "s2": 1} {
		require.Equal(t, want, hrw.Pick(hrw.KeyHash(sid), nodes), "hrw placement of %s", sid)
	}

	tests := []struct {
		policy string
		ttl    time.Duration
		want   handWant
	}{
		// Alternates. Reuse: r2 1024 (0,1), r3 512, r4 512, r5 512, r6 1024.
		// Latency: r0 1100, r1 1100, r2 3576, r3 88, r4 waits to 5576 then 1088 -> 2664,
		// r5 1588, r6 waits to 6664 then 76 -> 740.
		{"round-robin", 0, handWant{routes: []int{0, 1, 0, 1, 0, 1, 0}, reused: 3584, same: 1,
			work: []time.Duration{5840 * ms, 2776 * ms}, p50: 1100 * ms, p99: 3576 * ms, hits: -1, affinityPct: 25}},
		// r3 and r4 avoid backend-0, busy with r2's 3000 output tokens until 5576 ms; the
		// rotor breaks the idle tie at r0 towards backend-0.
		{"least-loaded", 0, handWant{routes: []int{0, 1, 0, 1, 1, 1, 0}, reused: 4096, same: 2,
			work: []time.Duration{4752 * ms, 3352 * ms}, p50: 1100 * ms, p99: 3576 * ms, hits: -1, affinityPct: 50}},
		// Longest cached prefix beyond block 0, else least loaded: r4 follows block 3 to
		// backend-1, r5 follows blocks 1 5 to backend-0 and waits 576 ms there.
		{"cache-aware", 0, handWant{routes: []int{0, 1, 0, 1, 1, 0, 0}, reused: 5120, same: 4,
			work: []time.Duration{5316 * ms, 1764 * ms}, p50: 1100 * ms, p99: 3576 * ms, hits: -1, affinityPct: 100}},
		// A and B on backend-0, C on backend-1. Reuse: r1 512, r2 1024, r4 1024 (0,3),
		// r5 1536, r6 1024. Latency: 1100, 688, 3576, 600, 2152, 1716, 792.
		{"hrw", 0, handWant{routes: []int{0, 0, 0, 1, 0, 0, 0}, reused: 5120, same: 4,
			work: []time.Duration{6480 * ms, 600 * ms}, p50: 1100 * ms, p99: 3576 * ms, hits: -1, affinityPct: 100}},
		// Same placement as hrw; every continuing turn is within the TTL: 4 hits.
		{"scheduler", 0, handWant{routes: []int{0, 0, 0, 1, 0, 0, 0}, reused: 5120, same: 4,
			work: []time.Duration{6480 * ms, 600 * ms}, p50: 1100 * ms, p99: 3576 * ms, hits: 4, affinityPct: 100}},
		// TTL 3 s of trace time: r2 (2 s after r0) and r6 (1 s after r5) hit; r4 and r5
		// come exactly 3 s after their session's last use: expired (now >= lastUse+TTL),
		// a miss that re-binds to the same HRW winner.
		{"scheduler", 3 * time.Second, handWant{routes: []int{0, 0, 0, 1, 0, 0, 0}, reused: 5120, same: 4,
			work: []time.Duration{6480 * ms, 600 * ms}, p50: 1100 * ms, p99: 3576 * ms, hits: 2, affinityPct: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.policy+"/ttl="+tt.ttl.String(), func(t *testing.T) {
			res, routes := replayHand(t, handTrace, tt.policy, PolicyConfig{TTL: tt.ttl}, nil)
			w := tt.want
			assert.Equal(t, w.routes, routes, "routes")
			assert.Equal(t, int64(9200), res.InputTokens)
			assert.Equal(t, w.reused, res.ReusedTokens, "reused tokens")
			assert.InDelta(t, float64(w.reused)/9200, res.HitRatio(), 1e-12)
			assert.Equal(t, 4, res.Continuing)
			assert.Equal(t, w.same, res.SameBackend, "continuing turns on the previous backend")
			assert.Equal(t, w.work, res.Work, "work per backend")
			assert.InDelta(t, float64(max(w.work[0], w.work[1]))*2/float64(w.work[0]+w.work[1]), res.WorkImbalance(), 1e-12)
			assert.Equal(t, w.p50, res.Percentile(0.50), "p50")
			assert.Equal(t, w.p99, res.Percentile(0.99), "p99")
			if w.hits < 0 {
				assert.False(t, res.ReportsHit)
			} else {
				assert.True(t, res.ReportsHit)
				assert.Equal(t, w.hits, res.Hits, "scheduler hits")
				assert.Equal(t, 7-w.hits, res.Misses, "scheduler misses")
			}
			assert.InDelta(t, w.affinityPct, 100*res.AffinityRate(), 1e-9)
		})
	}
}

func TestRandomPolicy(t *testing.T) {
	a, ra := replayHand(t, handTrace, "random", PolicyConfig{Seed: 7}, nil)
	b, rb := replayHand(t, handTrace, "random", PolicyConfig{Seed: 7}, nil)
	assert.Equal(t, ra, rb, "same seed, same routes")
	assert.Equal(t, a.Latencies, b.Latencies)
	// The documented stream: one IntN(up backends) draw per request.
	p, err := NewPolicy("random", PolicyConfig{Seed: 7})
	require.NoError(t, err)
	rng := p.(*randomPolicy).rng
	for i, got := range ra {
		assert.Equal(t, rng.IntN(2), got, "request %d", i)
	}
	var differs bool
	for seed := uint64(8); seed < 16 && !differs; seed++ {
		_, r := replayHand(t, handTrace, "random", PolicyConfig{Seed: seed}, nil)
		differs = !assert.ObjectsAreEqual(ra, r)
	}
	assert.True(t, differs, "other seeds give other routes")
}

// TestOutageHandTrace: backend-0 is down from 2.5 s to 4.5 s of trace time (applied
// before r3 and before r5), and B returns at 7 s (r7).
func TestOutageHandTrace(t *testing.T) {
	events, err := ParseEvents("0:2500ms-4500ms", 2)
	require.NoError(t, err)
	tests := []struct {
		policy string
		routes []int
		hits   int
	}{
		{"round-robin", []int{0, 1, 0, 1, 1, 0, 1, 0}, -1},
		// r5: backend-0 still owes 576 ms of r2's work; r6: backend-1 owes 588 ms.
		{"least-loaded", []int{0, 1, 0, 1, 1, 1, 0, 1}, -1},
		// backend-0 comes back cold: r5 finds no prefix beyond block 0 anywhere (least
		// loaded: backend-1), then r6 and r7 follow their prefixes to backend-1.
		{"cache-aware", []int{0, 1, 0, 1, 1, 1, 1, 1}, -1},
		// No table: B moves to its runner-up during the outage and back after it.
		{"hrw", []int{0, 0, 0, 1, 1, 0, 0, 0}, -1},
		// OnBackendDown drops the bindings of A and B; B re-binds to backend-1 and stays
		// there after backend-0 returns (no failback): r7 is a hit on backend-1. A has no
		// turn during the outage, so r5 misses and lands on its HRW winner again.
		{"scheduler", []int{0, 0, 0, 1, 1, 0, 0, 1}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			res, routes := replayHand(t, handTrace+handTraceR7, tt.policy, PolicyConfig{}, events)
			assert.Equal(t, tt.routes, routes)
			if tt.hits >= 0 {
				assert.Equal(t, tt.hits, res.Hits)
			}
		})
	}
	t.Run("random skips the down backend", func(t *testing.T) {
		for seed := range uint64(20) {
			_, routes := replayHand(t, handTrace+handTraceR7, "random", PolicyConfig{Seed: seed}, events)
			assert.Equal(t, []int{1, 1}, routes[3:5], "seed %d", seed)
		}
	})
	t.Run("scheduler counts the broken bindings", func(t *testing.T) {
		reqs, s, ids := readHand(t, handTrace+handTraceR7)
		p, err := NewPolicy("scheduler", PolicyConfig{Backends: 2, TTL: 30 * time.Minute})
		require.NoError(t, err)
		_, err = Replay(reqs, s, ids, p, ReplayConfig{Backends: 2, CacheBlocks: 100, Model: handModel, Events: events}, nil)
		require.NoError(t, err)
		st := p.(*schedulerPolicy).Stats()
		assert.Equal(t, uint64(3), st.Hits)
		assert.Equal(t, uint64(5), st.Misses)
	})
	t.Run("all down", func(t *testing.T) {
		reqs, s, ids := readHand(t, handTrace)
		evs, err := ParseEvents("0:0s-,1:1s-", 2)
		require.NoError(t, err)
		for _, name := range PolicyNames {
			p, err := NewPolicy(name, PolicyConfig{Backends: 2, TTL: time.Minute})
			require.NoError(t, err)
			_, err = Replay(reqs, s, ids, p, ReplayConfig{Backends: 2, CacheBlocks: 100, Model: handModel, Events: evs}, nil)
			assert.ErrorIs(t, err, ErrNoBackendUp, name)
		}
	})
}

func TestParseEvents(t *testing.T) {
	got, err := ParseEvents(" 2:600s-900s, 5:20m-", 8)
	require.NoError(t, err)
	assert.Equal(t, []Event{{Backend: 2, Down: 600 * time.Second, Up: 900 * time.Second},
		{Backend: 5, Down: 20 * time.Minute}}, got)
	got, err = ParseEvents("", 8)
	require.NoError(t, err)
	assert.Empty(t, got)
	for _, bad := range []string{"2", "2:600s", "x:1s-2s", "8:1s-2s", "-1:1s-2s", "1:abc-2s", "1:2s-1s", "1:2s-2s", "1:-1s-2s"} {
		_, err := ParseEvents(bad, 8)
		assert.ErrorIs(t, err, ErrBadEvent, bad)
	}
}

func TestNewPolicyUnknown(t *testing.T) {
	_, err := NewPolicy("nope", PolicyConfig{Backends: 2})
	assert.ErrorIs(t, err, ErrUnknownPolicy)
}

func TestParseSweep(t *testing.T) {
	grid, err := ParseSweep("1.1, 1.5 x 0,8")
	require.NoError(t, err)
	assert.Equal(t, []SweepPoint{{1.1, 0}, {1.1, 8}, {1.5, 0}, {1.5, 8}}, grid)
	grid, err = ParseSweep("")
	require.NoError(t, err)
	assert.Empty(t, grid)
	for _, bad := range []string{"1.1,1.5", "a x 1", "1.1 x b", "0.5 x 1", "1.2 x -1", "0 x 1"} {
		_, err := ParseSweep(bad)
		assert.ErrorIs(t, err, ErrBadSweep, bad)
	}
}
