package affinity_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Acquire leases each request into a Lease the caller owns; Done releases it with the
// usage the backend reported, and the Lease can then be filled again.
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
	var lease affinity.Lease // e.g. a field of the request's state; share it as *Lease
	for turn := 1; turn <= 2; turn++ {
		err := sched.Acquire("session-42", "", backends, 3000, &lease) // cost: ~body bytes / 4
		if err != nil {
			panic(err)
		}
		fmt.Printf("turn %d: %s in flight=%d\n", turn, lease.Outcome, sched.Load(lease.Backend.ID()).Requests)
		// ... forward to lease.Backend.Addr(), read the response ...
		lease.Done(affinity.DoneInfo{PromptTokens: 3000, CachedPromptTokens: int64(turn-1) * 2900, CacheReported: true})
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
	var first, busy, next affinity.Lease
	_ = sched.Acquire("agent-7", "", backends, 2000, &first)
	first.Done(affinity.DoneInfo{PromptTokens: 2000, CacheReported: true})
	home := first.Backend
	// Other traffic piles 40,000 tokens of prefill onto the session's backend.
	_ = sched.Acquire("batch-job", "", []affinity.Backend{home}, 40000, &busy)
	_ = sched.Acquire("agent-7", "", backends, 2100, &next)
	fmt.Println(next.Outcome, next.AffinityHit, next.Backend.ID() != home.ID(), sched.Stats().Broken.Overloaded)
	next.Done(affinity.DoneInfo{})
	busy.Done(affinity.DoneInfo{})
	// Output:
	// spill false true 1
}

// A request the caller sends elsewhere itself (here a retry after the session's backend
// failed) is leased where it is served; the session's binding stays where it was.
func ExampleScheduler_LeaseBackend() {
	sched, _ := affinity.New(affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25}})
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "", 1),
		affinity.MustBackend("vllm-1", "", 1),
	}
	var first, retry affinity.Lease
	_ = sched.Acquire("session-9", "", backends, 1000, &first)
	bound := first.Backend
	other := backends[0]
	if other.ID() == bound.ID() {
		other = backends[1]
	}
	first.Done(affinity.DoneInfo{Err: fmt.Errorf("connection refused")}) // the attempt failed
	_ = sched.LeaseBackend(other, 1000, &retry)
	fmt.Println(retry.Outcome, retry.AffinityHit, sched.Load(other.ID()).Requests, sched.Load(bound.ID()).Requests)
	retry.Done(affinity.DoneInfo{PromptTokens: 250, CacheReported: true})
	b, _ := sched.Lookup("session-9", "")
	fmt.Println(b == bound.ID(), sched.Load(other.ID()).Requests, sched.Stats().Hits+sched.Stats().Misses)
	// Output:
	// miss false 1 0
	// true 0 1
}
