package affinity_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/metrics"
)

// The embedding in a gateway: build the backends once, call SelectBackend per request.
func Example() {
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
		affinity.MustBackend("vllm-2", "http://10.0.0.12:8000", 1),
	}
	sched, err := affinity.New(affinity.Config{}) // sticky_ttl_seconds 1800
	if err != nil {
		panic(err)
	}
	for turn := 1; turn <= 3; turn++ {
		b, hit, _ := sched.SelectBackend("session-42", "", backends)
		fmt.Println(turn, b.Addr(), hit)
	}
	// Output:
	// 1 http://10.0.0.10:8000 false
	// 2 http://10.0.0.10:8000 true
	// 3 http://10.0.0.10:8000 true
}

// A backend goes down: its bindings are dropped and counted broken once; the sessions
// move to their HRW runner-up and stay there when it comes back (no failback).
func ExampleScheduler_OnBackendDown() {
	backends := []affinity.Backend{
		affinity.MustBackend("vllm-0", "http://10.0.0.10:8000", 1),
		affinity.MustBackend("vllm-1", "http://10.0.0.11:8000", 1),
		affinity.MustBackend("vllm-2", "http://10.0.0.12:8000", 1),
	}
	counters := metrics.NewCounters()
	sched, _ := affinity.New(affinity.Config{}, affinity.WithRecorder(counters))
	b, _, _ := sched.SelectBackend("session-42", "", backends)
	fmt.Println("bound to", b.ID())

	fmt.Println("dropped", sched.OnBackendDown(b.ID()))
	b2, hit, _ := sched.SelectBackend("session-42", "", backends)
	fmt.Println("now on", b2.ID(), hit)

	sched.OnBackendUp(b.ID())
	b3, hit, _ := sched.SelectBackend("session-42", "", backends)
	fmt.Println("after recovery", b3.ID(), hit)
	fmt.Println("broken:", counters.Total().Broken[metrics.ReasonDown])
	// Output:
	// bound to vllm-0
	// dropped 1
	// now on vllm-1 false
	// after recovery vllm-1 true
	// broken: 1
}

// Configuration from JSON (YAML works the same through yaml.v3 or sigs.k8s.io/yaml): an
// omitted sticky_ttl_seconds is the default 1800, an explicit 0 disables affinity.
func ExampleConfig() {
	for _, doc := range []string{
		`{"max_bindings": 100000}`,
		`{"sticky_ttl_seconds": 0}`,
		`{"sticky_ttl_seconds": 600, "tiers": {"batch": {"sticky_ttl_seconds": 60}}}`,
		`{"sticky_ttl_seconds": -5}`,
	} {
		var cfg affinity.Config
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			fmt.Println(err)
			continue
		}
		s, err := affinity.New(cfg)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(s.Table().TTL(""), s.Table().TTL("batch"))
	}
	// Output:
	// 30m0s 30m0s
	// 0s 0s
	// 10m0s 1m0s
	// affinity: invalid config: sticky_ttl_seconds: -5: must be whole seconds, 0..9223372036 (0: affinity off; omitted: the default, 1800)
}

// Expiry is exact and sliding: a binding is expired when now >= lastUse + TTL.
func ExampleScheduler_Sweep() {
	clk := affinitytest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	sched, _ := affinity.New(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(60)}, affinity.WithClock(clk))
	backends := []affinity.Backend{affinity.MustBackend("a", "", 1), affinity.MustBackend("b", "", 1)}
	for _, s := range []string{"s1", "s2", "s3"} {
		_, _, _ = sched.SelectBackend(s, "", backends)
	}
	clk.Advance(59 * time.Second)
	_, hit, _ := sched.SelectBackend("s1", "", backends) // slides s1 to 59s + 60s
	fmt.Println("hit:", hit)
	clk.Advance(time.Second)
	fmt.Println("swept:", sched.Sweep(), "left:", sched.Len())
	// Output:
	// hit: true
	// swept: 2 left: 1
}

// The table on its own: (tier, session) -> backend ID with sliding TTL and LRU cap.
func ExampleTable() {
	t, _ := affinity.NewTable(affinity.Config{MaxBindings: 1000})
	_ = t.Bind("session-1", "gold", "vllm-3")
	id, ok := t.Get("session-1", "gold")
	fmt.Println(id, ok, t.DeleteBackend("vllm-3"), t.Len())
	// Output: vllm-3 true 1 0
}

// An operator drains a backend; its health checks fail and pass again, and it is still
// draining: only Undrain puts it back into new placements.
func ExampleScheduler_Undrain() {
	sched, err := affinity.New(affinity.Config{})
	if err != nil {
		panic(err)
	}
	h := sched.Health()
	sched.OnBackendDraining("vllm-1") // operator: no new sessions
	sched.Observe("vllm-1", false)    // health check: down (its bindings are dropped)
	fmt.Println(h.State("vllm-1"))
	sched.Observe("vllm-1", true) // health check: up again
	fmt.Println(h.State("vllm-1"))
	sched.Undrain("vllm-1") // operator: back in service
	fmt.Println(h.State("vllm-1"))
	// Output:
	// down
	// draining
	// healthy
}
