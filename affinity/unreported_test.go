package affinity_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
)

// A backend that does not report its cached prompt tokens (vLLM without
// --enable-prompt-tokens-details: no prompt_tokens_details, or null) gives Done a usage
// with CachedPromptTokens 0 and CacheReported false. That count is unknown, not a lost
// cache: it must never make a move free (rules 17 and 18), count as 0 % reuse, or teach
// the drain model an eviction. A reported 0 still does all of these.

var (
	reportedLost = affinity.DoneInfo{PromptTokens: 1000, CacheReported: true}
	unreported   = affinity.DoneInfo{PromptTokens: 1000}
)

// TestUnreportedCacheSpillGuard (rule 17): with a weight that keeps a warm 1000-token
// prefix against a 50,000-token queue, only a hit that reported its cache lost spills;
// an unreported count leaves the prefix protected, and clears an earlier lost report
// (the cold flag describes the last turn).
func TestUnreportedCacheSpillGuard(t *testing.T) {
	bs := backendsN(4)
	for _, tc := range []struct {
		name  string
		dones []affinity.DoneInfo // the hits' usage, in order, before the busy turn
		want  affinity.Outcome
	}{
		{"reported 0", []affinity.DoneInfo{reportedLost}, affinity.OutcomeSpill},
		{"not reported", []affinity.DoneInfo{unreported}, affinity.OutcomeHit},
		{"not reported after a lost report", []affinity.DoneInfo{reportedLost, unreported}, affinity.OutcomeHit},
		{"negative count", []affinity.DoneInfo{{PromptTokens: 1000, CachedPromptTokens: -1, CacheReported: true}}, affinity.OutcomeHit},
		{"reported warm", []affinity.DoneInfo{{PromptTokens: 1000, CachedPromptTokens: 990}}, affinity.OutcomeHit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &metrics.Recording{}
			s, _ := newSched(t, loadCfg(1.5, 100), affinity.WithRecorder(rec))
			first, err := acquire(s, "sess", "gold", bs, 1000)
			require.NoError(t, err)
			first.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
			for _, info := range tc.dones {
				l, err := acquire(s, "sess", "gold", bs, 1000)
				require.NoError(t, err)
				require.Equal(t, affinity.OutcomeHit, l.Outcome)
				l.Done(info)
			}
			busy, err := acquire(s, "pile", "", []affinity.Backend{first.Backend}, 50000)
			require.NoError(t, err)
			defer busy.Done(affinity.DoneInfo{})
			l, err := acquire(s, "sess", "gold", bs, 1000)
			require.NoError(t, err)
			defer l.Done(affinity.DoneInfo{})
			assert.Equal(t, tc.want, l.Outcome)
			spills := 0
			if tc.want == affinity.OutcomeSpill {
				spills = 1
			}
			assert.Equal(t, spills, rec.CountBroken("gold", metrics.ReasonOverloaded))
		})
	}
}

// TestUnreportedCacheNotReplaced (rule 18): a binding off its HRW winner whose last hit
// reported its cache lost is placed anew when its backend is busy and moves up to the
// idle winner; one whose last hit did not report its cached tokens has something to
// lose and stays (the guard alone cannot move it up its ranking).
func TestUnreportedCacheNotReplaced(t *testing.T) {
	bs := backendsN(2)
	ref, _ := newSched(t, affinity.Config{})
	sid := ""
	for i := 0; sid == ""; i++ {
		if b, _, _ := ref.SelectBackend(fmt.Sprintf("s%d", i), "", bs); b.ID() == bs[0].ID() {
			sid = fmt.Sprintf("s%d", i)
		}
	}
	top, other := bs[0], bs[1]
	for _, tc := range []struct {
		name string
		info affinity.DoneInfo
		want affinity.Outcome
		on   string
	}{
		{"reported 0", affinity.DoneInfo{PromptTokens: 1500, CacheReported: true}, affinity.OutcomeSpill, top.ID()},
		{"not reported", affinity.DoneInfo{PromptTokens: 1500}, affinity.OutcomeHit, other.ID()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSched(t, loadCfg(1.25, 5))
			report := func(a, b int64) {
				t.Helper()
				require.NoError(t, s.ReportLoad(top.ID(), affinity.BackendLoad{Waiting: a}))
				require.NoError(t, s.ReportLoad(other.ID(), affinity.BackendLoad{Waiting: b}))
			}
			report(20, 0) // the HRW winner busy: placed on the other backend
			l, err := acquire(s, sid, "", bs, 1000)
			require.NoError(t, err)
			require.Equal(t, other.ID(), l.Backend.ID())
			l.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true})
			report(0, 0)
			l, err = acquire(s, sid, "", bs, 1500)
			require.NoError(t, err)
			require.Equal(t, affinity.OutcomeHit, l.Outcome)
			l.Done(tc.info)

			report(0, 20) // the HRW winner idle, the bound backend busy
			l, err = acquire(s, sid, "", bs, 2000)
			require.NoError(t, err)
			defer l.Done(affinity.DoneInfo{})
			assert.Equal(t, tc.want, l.Outcome)
			assert.Equal(t, tc.on, l.Backend.ID())
		})
	}
}

// TestUnreportedCacheReuse: achieved reuse (Scheduler.Reuse and metrics.UsageRecorder)
// counts hits whose cached tokens were reported, 0 included, and leaves out the others
// (their reuse is unknown, not 0 %).
func TestUnreportedCacheReuse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dones  []affinity.DoneInfo
		want   affinity.TierReuse
		events int
	}{
		{"not reported", []affinity.DoneInfo{unreported, unreported}, affinity.TierReuse{}, 0},
		{"reported 0", []affinity.DoneInfo{reportedLost}, affinity.TierReuse{PromptTokens: 1000}, 1},
		{"mixed", []affinity.DoneInfo{{PromptTokens: 1000, CachedPromptTokens: 900}, unreported},
			affinity.TierReuse{PromptTokens: 1000, CachedPromptTokens: 900}, 1},
	} {
		for _, cfg := range []affinity.Config{{}, loadCfg(1.25, 5)} {
			t.Run(fmt.Sprintf("%s/load=%v", tc.name, cfg.Load.BalanceFactor > 0), func(t *testing.T) {
				rec := &metrics.Recording{}
				s, _ := newSched(t, cfg, affinity.WithRecorder(rec))
				bs := backendsN(3)
				l, err := acquire(s, "sess", "gold", bs, 1000)
				require.NoError(t, err)
				l.Done(affinity.DoneInfo{PromptTokens: 1000, CacheReported: true}) // a miss: never reuse
				for _, info := range tc.dones {
					l, err := acquire(s, "sess", "gold", bs, 1000)
					require.NoError(t, err)
					require.True(t, l.AffinityHit)
					l.Done(info)
				}
				assert.Equal(t, tc.want, s.Reuse("gold"))
				assert.Equal(t, tc.events, rec.Count(metrics.KindUsage, "gold"))
			})
		}
	}
}

// TestUnreportedCacheRetention (rule 14c): with the drain model, a hit that reported no
// cached tokens after 10 s idle is an eviction and sets the backend's retention; an
// unreported count teaches nothing, so hits stay charged as warm.
func TestUnreportedCacheRetention(t *testing.T) {
	for _, tc := range []struct {
		name string
		info affinity.DoneInfo
		want time.Duration
	}{
		{"reported 0", affinity.DoneInfo{PromptTokens: 1536, CacheReported: true}, 10 * time.Second},
		{"not reported", affinity.DoneInfo{PromptTokens: 1536}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newSched(t, drainCfg(1.25, 5, 1000, 2))
			b := backendsN(1)
			l, err := acquire(s, "a", "", b, 1024)
			require.NoError(t, err)
			l.Done(affinity.DoneInfo{PromptTokens: 1024, CacheReported: true})
			clk.Advance(10 * time.Second)
			l, err = acquire(s, "a", "", b, 1536)
			require.NoError(t, err)
			require.Equal(t, affinity.OutcomeHit, l.Outcome)
			l.Done(tc.info)
			assert.Equal(t, tc.want, s.Drain(b[0].ID()).CacheRetention)
		})
	}
}

// TestUnreportedPromptTeachesNoRetention (rule 14c, spillnoq): a hit whose binding has no
// reported prompt size (its previous turn reported no usage, as a stream without
// stream_options.include_usage) expects its whole cost cached, a guess: finding less
// than half of it cached is no evidence of an eviction. Turn 2, 10 s after turn 1,
// reports exactly turn 1's 1,024 tokens cached of 3,072: the retention is learned only
// when turn 1 reported its prompt (and then only from a real eviction); turn 3, whose
// binding now knows its prompt size, teaches it unless turn 2 found nothing cached (a
// cold binding expects no prefix: rule 17's reprefill 0).
func TestUnreportedPromptTeachesNoRetention(t *testing.T) {
	for _, tc := range []struct {
		name         string
		turn1        affinity.DoneInfo
		turn2Cached  int64
		want2, want3 time.Duration // retention after turn 2 and after turn 3 (an eviction, 10 s on)
		reason2      string
	}{
		{"turn 1 unreported, prefix found", affinity.DoneInfo{}, 1024, 0, 10 * time.Second,
			"1,024 cached < 3,072 / 2, but 3,072 was a guess: nothing learned"},
		{"turn 1 unreported, nothing cached", affinity.DoneInfo{}, 0, 0, 0,
			"no reported prompt size: no evidence either way (and turn 2 leaves the binding cold: turn 3 expects nothing)"},
		{"turn 1 reported, prefix found", affinity.DoneInfo{PromptTokens: 1024, CacheReported: true}, 1024, 0, 10 * time.Second,
			"the reported 1,024 tokens survived"},
		{"turn 1 reported, evicted", affinity.DoneInfo{PromptTokens: 1024, CacheReported: true}, 0, 10 * time.Second, 10 * time.Second,
			"the reported prefix was evicted after 10 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newSched(t, drainCfg(1.25, 5, 1000, 0))
			b := backendsN(1)
			id := b[0].ID()
			turn := func(cost int64, info affinity.DoneInfo) {
				t.Helper()
				l, err := acquire(s, "a", "", b, cost)
				require.NoError(t, err)
				l.Done(info)
			}
			turn(1024, tc.turn1)
			clk.Advance(10 * time.Second)
			turn(3072, affinity.DoneInfo{PromptTokens: 3072, CachedPromptTokens: tc.turn2Cached, CacheReported: true})
			assert.Equal(t, tc.want2, s.Drain(id).CacheRetention, tc.reason2)
			clk.Advance(10 * time.Second)
			turn(4096, affinity.DoneInfo{PromptTokens: 4096, CacheReported: true})
			assert.Equal(t, tc.want3, s.Drain(id).CacheRetention, "turn 3 knows turn 2's prompt size")
		})
	}
}
