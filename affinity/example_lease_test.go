package affinity_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Acquire leases each request; Done releases it with the usage the backend reported.
func ExampleScheduler_Acquire() {
	cfg := affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25}}
	sched, err := affinity.New(cfg)
	if err != nil {
		panic(err)
	}
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
	}
	for turn := 1; turn <= 2; turn++ {
		lease, err := sched.Acquire("session-42", "", backends, 3000) // cost: ~body bytes / 4
		if err != nil {
			panic(err)
		}
		fmt.Printf("turn %d: %s in flight=%d\n", turn, lease.Outcome, sched.Load(lease.Backend.ID()).Requests)
		// ... forward to lease.Backend.Addr(), read the response ...
		lease.Done(affinity.DoneInfo{PromptTokens: 3000, CachedPromptTokens: int64(turn-1) * 2900})
		lease.Done(affinity.DoneInfo{}) // idempotent
	}
	fmt.Printf("reuse on hits: %.2f\n", sched.Reuse("").Ratio())
	// Output:
	// turn 1: miss in flight=1
	// turn 2: hit in flight=1
	// reuse on hits: 0.97
}

// A busy session moves (spills) to the next backend of its own HRW ranking when the wait
// it saves outweighs the prefix it must re-prefill.
func ExampleScheduler_Acquire_spill() {
	w := 0.5
	sched, _ := affinity.New(affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25, SpillCostWeight: &w}})
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "", 1),
		affinity.MustBackend("vllm-1", "", 1),
		affinity.MustBackend("vllm-2", "", 1),
	}
	first, _ := sched.Acquire("agent-7", "", backends, 2000)
	first.Done(affinity.DoneInfo{PromptTokens: 2000})
	home := first.Backend
	// Other traffic piles 40,000 tokens of prefill onto the session's backend.
	busy, _ := sched.Acquire("batch-job", "", []affinity.Backend{home}, 40000)
	next, _ := sched.Acquire("agent-7", "", backends, 2100)
	fmt.Println(next.Outcome, next.AffinityHit, next.Backend.ID() != home.ID(), sched.Stats().Broken.Overloaded)
	next.Done(affinity.DoneInfo{})
	busy.Done(affinity.DoneInfo{})
	// Output:
	// spill false true 1
}
