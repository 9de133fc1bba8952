package affinity_test

import (
	"fmt"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// With the drain model a backend's queued work drains with time at a rate learned from
// each response, so a long answer still streaming stops counting as queued prefill.
func ExampleScheduler_Drain() {
	clk := affinitytest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	sched, err := affinity.New(affinity.Config{Load: affinity.LoadConfig{BalanceFactor: 1.25,
		DrainTokensPerSecond: 10000}}, affinity.WithClock(clk))
	if err != nil {
		panic(err)
	}
	b := []affinity.Backend{affinity.MustBackend("vllm-0", "", 1)}
	var l affinity.Lease
	_ = sched.Acquire("s1", "", b, 8000, &l)
	fmt.Println("queued:", sched.LoadView("vllm-0"))
	clk.Advance(400 * time.Millisecond) // the prompt is half done at 10,000 tokens/s
	fmt.Println("queued after 400 ms:", sched.LoadView("vllm-0"))
	clk.Advance(1600 * time.Millisecond) // the answer ends 2 s after the request
	l.Done(affinity.DoneInfo{PromptTokens: 8000, CacheReported: true})
	// One sample, 8,000 tokens in 2 s of service (decode included); more samples of
	// different sizes separate a per-request time (Drain().PerRequest) from the rate.
	fmt.Printf("learned: %.0f tokens/s\n", sched.Drain("vllm-0").TokensPerSecond)
	// Output:
	// queued: 8000
	// queued after 400 ms: 4000
	// learned: 4000 tokens/s
}
