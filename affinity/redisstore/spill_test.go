package redisstore_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// TestFleetSpills: three load-aware replicas on one Redis. Replicas 0 and 1 see backend
// b0 overloaded (their ReportLoad) and serve the next turn of every session at the same
// time: each session bound to b0 spills once in total — the spill is a compare-and-set in
// Redis, the slower replica adopts it — and afterwards every replica, replica 2 included,
// returns the same backend for every session.
func TestFleetSpills(t *testing.T) {
	const n = 2000
	cfg := affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25, SpillCostWeight: affinity.SpillWeight(0)}}
	f := newFleet(t, 3, cfg)
	first := map[string]string{}
	var l affinity.Lease
	for i := range n {
		require.NoError(t, f.scheds[i%3].Acquire(session(i), "", f.cands, 1000, &l))
		require.Equal(t, affinity.OutcomeMiss, l.Outcome)
		first[session(i)] = l.Backend.ID()
		l.Done(affinity.DoneInfo{})
	}
	f.agree(t, n, 0)
	onB0 := 0
	for _, b := range first {
		if b == "b0" {
			onB0++
		}
	}
	require.Positive(t, onB0)

	for r := range 2 {
		require.NoError(t, f.scheds[r].ReportLoad("b0", affinity.BackendLoad{Waiting: 500}))
	}
	outcomes := make([]map[affinity.Outcome]int, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		outcomes[r] = map[affinity.Outcome]int{}
		wg.Go(func() {
			var l affinity.Lease
			for i := range n {
				if err := f.scheds[r].Acquire(session(i), "", f.cands, 1000, &l); err != nil {
					panic(err)
				}
				outcomes[r][l.Outcome]++
				l.Done(affinity.DoneInfo{})
			}
		})
	}
	wg.Wait()
	spills := outcomes[0][affinity.OutcomeSpill] + outcomes[1][affinity.OutcomeSpill]
	require.Equal(t, onB0, spills, "one spill per session on b0, fleet-wide: %v", outcomes)
	require.Zero(t, outcomes[0][affinity.OutcomeMiss]+outcomes[1][affinity.OutcomeMiss])

	got := f.agree(t, n, 2)
	for i := range n {
		if first[session(i)] == "b0" {
			require.NotEqual(t, "b0", got[session(i)], "session %d", i)
		} else {
			require.Equal(t, first[session(i)], got[session(i)], "session %d", i)
		}
	}
	var overloaded uint64
	for _, s := range f.scheds {
		overloaded += s.Stats().Broken.Overloaded
	}
	require.Equal(t, uint64(onB0), overloaded)
}
