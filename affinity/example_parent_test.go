package affinity_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
)

// A subagent's first turn starts on its parent session's backend, where the shared
// system prompt and tool definitions are already cached; afterwards it has its own
// binding. Gateways take the parent ID from a header such as x-parent-session-id.
func ExampleScheduler_SelectBackendWithParent() {
	sched, err := affinity.New(affinity.Config{})
	if err != nil {
		panic(err)
	}
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
		affinity.MustBackend("vllm-2", "http://10.0.0.12:8000", 1),
	}
	parent, _, err := sched.SelectBackend("main-session", "", backends)
	if err != nil {
		panic(err)
	}
	for range 2 {
		b, placed, err := sched.SelectBackendWithParent("subagent-1", "main-session", "", backends)
		if err != nil {
			panic(err)
		}
		fmt.Println(placed, b.ID() == parent.ID())
	}
	st := sched.Stats()
	fmt.Printf("hits=%d misses=%d parent_placed=%d\n", st.Hits, st.Misses, st.ParentPlaced)
	// Output:
	// parent true
	// hit true
	// hits=1 misses=2 parent_placed=1
}
