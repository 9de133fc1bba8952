package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// TestDrainDeterminism: two Schedulers with the drain model fed the same calls at the
// same (fake) times decide alike, spills included.
func TestDrainDeterminism(t *testing.T) {
	rs, bs := runTwins(t, drainCfg(1.1, 1, 2000, 2), twinScript{seed: 7, steps: 5000, sessions: 300, maxAdvanceMS: 400, doneOneIn: 3, cachedSteps: 2, cachedUnit: 2000})
	for _, b := range bs {
		assert.Equal(t, rs[0].Drain(b.ID()), rs[1].Drain(b.ID()))
		assert.Equal(t, affinity.LoadSnapshot{}, rs[0].Load(b.ID()))
	}
}

// twinScript is a random sequence of Acquire and Done calls with fake-clock advances for
// runTwins: seed picks it; each step first advances both clocks by [0, maxAdvanceMS) ms,
// then releases a random open lease (with chance 1/doneOneIn, reporting 3,000 prompt
// tokens of which cachedUnit x [0, cachedSteps) cached) or acquires a lease for one of
// sessions sessions at a cost in [1, 8000].
type twinScript struct {
	seed                               uint64
	steps, sessions, maxAdvanceMS      int
	doneOneIn, cachedSteps, cachedUnit int
}

// runTwins builds two Schedulers with cfg over 5 backends, plays sc on both and requires
// that every call decides alike (backend and outcome), that some call spilled, and that
// both end with the same Stats once every lease is done. It returns them for further
// checks.
func runTwins(t *testing.T, cfg affinity.Config, sc twinScript) ([2]*affinity.Scheduler, []affinity.Backend) {
	t.Helper()
	var rs [2]*affinity.Scheduler
	var clks [2]*affinitytest.Clock
	for k := range rs {
		rs[k], clks[k] = newSched(t, cfg)
	}
	bs := backendsN(5)
	rng := rand.New(rand.NewPCG(sc.seed, sc.seed+1))
	var live [][2]*affinity.Lease
	spills := 0
	for step := range sc.steps {
		if d := time.Duration(rng.IntN(sc.maxAdvanceMS)) * time.Millisecond; d > 0 {
			for k := range clks {
				clks[k].Advance(d)
			}
		}
		if len(live) > 0 && rng.IntN(sc.doneOneIn) == 0 {
			j := rng.IntN(len(live))
			info := affinity.DoneInfo{PromptTokens: 3000, CachedPromptTokens: int64(rng.IntN(sc.cachedSteps) * sc.cachedUnit), CacheReported: true}
			for k := range rs {
				live[j][k].Done(info)
			}
			live = append(live[:j], live[j+1:]...)
			continue
		}
		session, cost := fmt.Sprintf("s%d", rng.IntN(sc.sessions)), int64(1+rng.IntN(8000))
		var o [2]*affinity.Lease
		for k := range rs {
			l, err := acquire(rs[k], session, "", bs, cost)
			require.NoError(t, err)
			o[k] = l
		}
		require.Equal(t, o[0].Backend.ID(), o[1].Backend.ID(), "step %d", step)
		require.Equal(t, o[0].Outcome, o[1].Outcome, "step %d", step)
		if o[0].Outcome == affinity.OutcomeSpill {
			spills++
		}
		live = append(live, o)
	}
	for _, o := range live {
		for k := range rs {
			o[k].Done(affinity.DoneInfo{})
		}
	}
	assert.Equal(t, rs[0].Stats(), rs[1].Stats())
	assert.Positive(t, spills, "the run exercised spills")
	return rs, bs
}
