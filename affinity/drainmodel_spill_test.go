package affinity_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/hrw"
)

// gatewayLoad is the load block of examples/configs/gateway.yaml; drain false turns the
// drain model off (and the retention guard, which needs it).
func gatewayLoad(drain bool) affinity.Config {
	l := affinity.LoadConfig{BalanceFactor: 1.25, SpillCostWeight: affinity.SpillWeight(5), ColdCacheRatio: 0.001}
	if drain {
		l.DrainTokensPerSecond, l.RetentionGuardFactor = 16000, 2.5
	}
	return affinity.Config{Load: l}
}

// sessionsOn returns n session IDs (prefix + a number) that rank backend i first among
// cands: with no load anywhere, Acquire places them there.
func sessionsOn(cands []affinity.Backend, i, n int, prefix string) []string {
	nodes := make([]hrw.Node, len(cands))
	for j, b := range cands {
		nodes[j] = b.Node()
	}
	var out []string
	for k := 0; len(out) < n; k++ {
		if id := fmt.Sprintf("%s%d", prefix, k); hrw.Pick(hrw.KeyHash(id), nodes) == i {
			out = append(out, id)
		}
	}
	return out
}

// TestDrainSpillFollowsTheViewNotTheLastReport is tester23's "inverted spill" made
// deterministic (docs/load-aware.md, "The drain model and a scripted backend"): the
// gateway's load block, two backends, a bound backend X with three requests held open
// (30,021 tokens charged) and the other idle. A session on X reports 100,000 prompt
// tokens per turn, none cached ("cold") or 99,000 ("warm"; another session's cold turns
// then teach X its retention, as on the tester's gateway, where the cold scenario ran
// first); the tester's backend answers every turn in 1 ms, a vLLM-like one ("paced") in
// uncached tokens / 16,000 s.
//
// The drain model behaves as designed (rules 14a, 14c, 17 and 18): whether a binding
// moves depends on X's view at that instant and on its idle time against X's learned
// retention, not on whether its last report was cold or warm. The scripted backend
// teaches a rate of ~9e7 tokens/s (100,000 uncached tokens in 1 ms), so the held
// requests' charges leave the view within a millisecond while the requests are still
// open, and a busy-looking X with view 0 keeps every binding; a cold turn after 11 ms
// sets X's retention to 11 ms, so a warm binding idle >= 2.5 x 11 ms counts as evicted
// and spills as soon as the view is above 0. The tester saw the cold session at a view
// of 0 and the warm one at a view above 0: timing, not an inversion.
func TestDrainSpillFollowsTheViewNotTheLastReport(t *testing.T) {
	const (
		prompt = 100000 // reported prompt tokens of every turn
		small  = 3      // cost of the tester's first two turns: a 14-byte body / 4
		big    = 10007  // cost of its third turn and of each held request: 40,028 bytes / 4
		held   = 3      // requests held open on X
	)
	cases := []struct {
		name   string
		drain  bool
		paced  bool          // service time = uncached tokens / 16,000 s, else 1 ms
		warm   bool          // the session reports 99,000 cached tokens, else 0
		idle   time.Duration // since the session's previous turn
		since  time.Duration // since the held requests were leased
		view   int64         // X's view at the third turn
		moves  bool          // the third turn spills to the idle backend
		reason string
	}{
		{"cold, drained view", true, false, false, 100 * time.Millisecond, time.Millisecond, 0, false,
			"tester23: three requests open on X, yet its view is 0 (drained at the learned rate): an idle backend is never overloaded"},
		{"warm past 2.5 retentions, charges just leased", true, false, true, 100 * time.Millisecond, 0, held * big, true,
			"tester23: idle 100 ms >= 2.5 x the 11 ms retention counts as evicted (reprefill 0), the view is above 0: rule 18 moves it"},
		{"cold, charges just leased", true, false, false, 100 * time.Millisecond, 0, held * big, true,
			"the cold binding moves too while the view is above 0"},
		{"warm past 2.5 retentions, drained view", true, false, true, 100 * time.Millisecond, time.Millisecond, 0, false,
			"and the warm one stays once the view has drained"},
		{"warm below 2.5 retentions, charges just leased", true, false, true, 20 * time.Millisecond, 0, held * big, false,
			"idle 20 ms < 27.5 ms keeps its reprefill (10,007): a wait of 30,021 <= 5 x 10,007"},
		{"cold, paced backend, 1 s later", true, true, false, 10 * time.Second, time.Second, held*big - 16000, true,
			"a backend whose service time grows with its uncached tokens keeps the held work in the view: 16,000 of 30,021 tokens drained in 1 s"},
		{"cold, drain model off", false, false, false, 100 * time.Millisecond, time.Millisecond, held * big, true,
			"lease-sum view: the cold binding moves, as tester23 saw"},
		{"warm, drain model off", false, false, true, 100 * time.Millisecond, time.Millisecond, held * big, false,
			"lease-sum view: the warm binding keeps its reprefill and stays, as tester23 saw"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newSched(t, gatewayLoad(tc.drain))
			b := backendsN(2)
			x := b[1].ID()
			service := func(uncached int64) time.Duration {
				if tc.paced {
					return time.Duration(uncached) * time.Second / 16000
				}
				return time.Millisecond
			}
			cached := int64(0)
			if tc.warm {
				cached = 99000
			}
			if tc.warm && tc.drain {
				// X's retention comes from another session's cold report, as on the
				// tester's gateway, where the cold scenario ran first.
				other := sessionsOn(b, 1, 1, "o")[0]
				for range 2 {
					l, err := acquire(s, other, "", b, small)
					require.NoError(t, err)
					require.Equal(t, x, l.Backend.ID())
					clk.Advance(time.Millisecond)
					l.Done(affinity.DoneInfo{PromptTokens: prompt, CacheReported: true})
					clk.Advance(10 * time.Millisecond)
				}
			}
			session := sessionsOn(b, 1, 1, "s")[0]
			var last time.Time
			for range 2 { // a miss, then a hit that reports the cache cold or warm
				last = clk.Now()
				l, err := acquire(s, session, "", b, small)
				require.NoError(t, err)
				require.Equal(t, x, l.Backend.ID())
				clk.Advance(service(prompt - cached))
				l.Done(affinity.DoneInfo{PromptTokens: prompt, CachedPromptTokens: cached, CacheReported: true})
				clk.Advance(10 * time.Millisecond)
			}
			if tc.drain && !tc.paced {
				assert.Greater(t, s.Drain(x).TokensPerSecond, 1e7, "1 ms per answer teaches a huge rate")
				assert.Equal(t, 11*time.Millisecond, s.Drain(x).CacheRetention, "the first cold hit, after 11 ms, sets the retention")
			}
			third := last.Add(tc.idle)
			require.False(t, third.Add(-tc.since).Before(clk.Now()), "the schedule runs forward")
			clk.Set(third.Add(-tc.since))
			open := make([]*affinity.Lease, held)
			for i := range open {
				open[i] = new(affinity.Lease)
				require.NoError(t, s.LeaseBackend(b[1], big, open[i]))
			}
			clk.Set(third)
			assert.Equal(t, affinity.LoadSnapshot{Requests: held, Cost: held * big}, s.Load(x))
			assert.Equal(t, int64(0), s.LoadView(b[0].ID()))
			assert.InDelta(t, tc.view, s.LoadView(x), 1, "X's view")

			l, err := acquire(s, session, "", b, big)
			require.NoError(t, err)
			assertSpilled(t, l, tc.moves, b[0].ID(), x, tc.reason)
			l.Done(affinity.DoneInfo{})
			for _, o := range open {
				o.Done(affinity.DoneInfo{})
			}
		})
	}
}

// TestDrainGuardWaitIsTheCharges (spillnoq, rule 17's wait under rule 14a): a backend X
// that has learned a per-request time (50 ms per request, 10,000 tokens/s) decodes four
// requests whose prefill was cached (charged 100 tokens each) while its peer is idle. Its
// view (the bound) counts their per-request time, ~2,400 tokens, so X is over the bound;
// its wait counts only their charges (400 tokens), which a session with a 320-token
// prefix (5 x 320 = 1,600) does not give up its cache for: the binding stays. Queued
// prefill (four misses of 3,000 tokens) still moves it, and drained work leaves the wait.
func TestDrainGuardWaitIsTheCharges(t *testing.T) {
	const (
		perRequest = 50 * time.Millisecond
		rate       = 10000 // tokens/s
		open       = 4
	)
	cases := []struct {
		name   string
		charge int64         // each open request's cost (a miss: charged in full)
		since  time.Duration // since the open requests were leased
		view   int64         // X's view at the hit
		moves  bool
		reason string
	}{
		{"decoding cached requests", 100, 0, open * (100 + 500), false,
			"wait 400 (the charges) <= 5 x 320: a request decoding in a batch slot holds back no new prefill"},
		{"queued prefill", 3000, 0, open * (3000 + 500), true,
			"wait 12,000 - 0 > 5 x 320: the queued prefill outweighs the prefix"},
		{"queued prefill, mostly drained", 3000, 1300 * time.Millisecond, 1000, false,
			"1.3 s of 1.4 s done: the wait (1,000 tokens of horizon) <= 1,600"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newSched(t, gatewayLoad(true))
			b := backendsN(2)
			x := b[1].ID()
			service := func(tokens int64) time.Duration {
				return perRequest + time.Duration(tokens)*time.Second/rate
			}
			// Teach X its service model: requests of different sizes, one at a time.
			for i := range 200 {
				l := new(affinity.Lease)
				tokens := int64(500 + 100*(i%40))
				require.NoError(t, s.LeaseBackend(b[1], tokens, l))
				clk.Advance(service(tokens))
				l.Done(affinity.DoneInfo{PromptTokens: tokens, CacheReported: true})
			}
			m := s.Drain(x)
			require.InEpsilon(t, rate, m.TokensPerSecond, 0.01, "%+v", m)
			require.InDelta(t, float64(perRequest), float64(m.PerRequest), float64(time.Millisecond), "%+v", m)
			require.Zero(t, m.CacheRetention)

			// A session bound to X whose last turn reported a 300-token prompt.
			session := sessionsOn(b, 1, 1, "s")[0]
			l, err := acquire(s, session, "", b, 300)
			require.NoError(t, err)
			require.Equal(t, x, l.Backend.ID())
			clk.Advance(service(300))
			l.Done(affinity.DoneInfo{PromptTokens: 300, CacheReported: true})
			clk.Advance(time.Second)

			held := make([]*affinity.Lease, open)
			for i := range held {
				held[i] = new(affinity.Lease)
				require.NoError(t, s.LeaseBackend(b[1], tc.charge, held[i]))
			}
			clk.Advance(tc.since)
			assert.InDelta(t, tc.view, s.LoadView(x), 2, "X's view keeps the per-request time")
			assert.Zero(t, s.LoadView(b[0].ID()))

			l, err = acquire(s, session, "", b, 350)
			require.NoError(t, err)
			assertSpilled(t, l, tc.moves, b[0].ID(), x, tc.reason)
			l.Done(affinity.DoneInfo{})
			for _, h := range held {
				h.Done(affinity.DoneInfo{})
			}
		})
	}
}

// assertSpilled checks that lease l spilled to backend to when moves, else stayed a hit
// on backend bound; reason names the case.
func assertSpilled(t *testing.T, l *affinity.Lease, moves bool, to, bound, reason string) {
	t.Helper()
	want, on := affinity.OutcomeHit, bound
	if moves {
		want, on = affinity.OutcomeSpill, to
	}
	assert.Equal(t, want, l.Outcome, reason)
	assert.Equal(t, on, l.Backend.ID(), reason)
}
