package affinity_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Two gateway replicas sharing bindings through a Store (here an in-memory one; in
// production affinity/redisstore on Redis). The second turn reaches the other replica
// and is still a hit; a failover seen by one replica moves the session for both.
func ExampleWithStore() {
	shared := newMemStore()
	replicaA, _ := affinity.New(affinity.Config{}, affinity.WithStore(shared))
	replicaB, _ := affinity.New(affinity.Config{}, affinity.WithStore(shared))
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
		affinity.MustBackend("vllm-2", "http://10.0.0.12:8000", 1),
	}
	b, hit, _ := replicaA.SelectBackend("session-42", "", backends)
	fmt.Println("turn 1 on A:", b.ID(), hit)
	b, hit, _ = replicaB.SelectBackend("session-42", "", backends)
	fmt.Println("turn 2 on B:", b.ID(), hit)

	replicaA.OnBackendDown(b.ID()) // only A's health checker sees it
	b, hit, _ = replicaA.SelectBackend("session-42", "", backends)
	fmt.Println("turn 3 on A:", b.ID(), hit)
	b, hit, _ = replicaB.SelectBackend("session-42", "", backends)
	fmt.Println("turn 4 on B:", b.ID(), hit)
	// Output:
	// turn 1 on A: vllm-0 false
	// turn 2 on B: vllm-0 true
	// turn 3 on A: vllm-1 false
	// turn 4 on B: vllm-1 true
}
