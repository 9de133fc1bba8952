package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/agentserve/sessionaffinity/health"
)

func ExampleSet() {
	var s health.Set // the zero value is ready: every backend Healthy
	unsubscribe := s.Subscribe(func(t health.Transition) { fmt.Println("transition", t) })
	defer unsubscribe()

	s.MarkDraining("vllm-1")
	s.MarkDown("vllm-2")
	fmt.Println("changed again:", s.MarkDown("vllm-2")) // no-op: not reported
	s.MarkUp("vllm-2")

	fmt.Println(s.State("vllm-0"), s.State("vllm-1"), s.State("vllm-2"), s.AllHealthy())
	// Output:
	// transition vllm-1: healthy -> draining
	// transition vllm-2: healthy -> down
	// changed again: false
	// transition vllm-2: down -> healthy
	// healthy draining healthy false
}

// An operator's drain outlasts health observations; only Undrain ends it.
func ExampleSet_Drain() {
	var s health.Set
	s.Drain("vllm-1")              // operator: no new sessions
	s.Observe("vllm-1", false)     // the health check fails
	fmt.Println(s.State("vllm-1")) // down wins
	s.Observe("vllm-1", true)      // it passes again
	fmt.Println(s.State("vllm-1"), s.Drained("vllm-1"))
	s.Undrain("vllm-1") // operator: back in service
	fmt.Println(s.State("vllm-1"))
	// Output:
	// down
	// draining true
	// healthy
}

func ExampleParseState() {
	st, err := health.ParseState("Draining")
	fmt.Println(st, err)
	_, err = health.ParseState("up")
	fmt.Println(err)
	// Output:
	// draining <nil>
	// health: unknown state: "up" (want healthy, draining or down)
}

// A Prober driven round by round with ProbeOnce; in production call Run(ctx) instead and
// pass the Scheduler's OnHealthChange to WithObserver.
func ExampleProber() {
	var up atomic.Bool
	up.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	p, err := health.NewProber(
		health.ProbeConfig{FailureThreshold: 2, SuccessThreshold: 2},
		[]health.Target{{ID: "vllm-0", URL: srv.URL}},
		health.WithObserver(func(t health.Transition) { fmt.Println("  observed", t) }),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for round, healthy := range []bool{true, false, false, false, true, true} {
		up.Store(healthy)
		fmt.Printf("round %d: backend healthy=%v\n", round+1, healthy)
		p.ProbeOnce(ctx)
	}
	fmt.Println("state:", p.State("vllm-0"))
	// Output:
	// round 1: backend healthy=true
	// round 2: backend healthy=false
	// round 3: backend healthy=false
	//   observed vllm-0: healthy -> down
	// round 4: backend healthy=false
	// round 5: backend healthy=true
	// round 6: backend healthy=true
	//   observed vllm-0: down -> healthy
	// state: healthy
}
