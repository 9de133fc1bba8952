package metrics_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/metrics"
)

// Counters aggregates the Scheduler's events per tier; Total sums the tiers.
func ExampleCounters() {
	c := metrics.NewCounters(metrics.WithMaxTiers(16))
	var r metrics.Recorder = c // what you pass to affinity.WithRecorder

	// One session, six turns: the first misses, the other five hit.
	r.Miss("gold")
	for range 5 {
		r.Hit("gold")
	}
	r.Broken("free", metrics.ReasonDown)

	gold := c.Snapshot()["gold"]
	fmt.Printf("gold: hits=%d misses=%d hit rate=%.1f%%\n", gold.Hits, gold.Misses, 100*gold.HitRate())
	free := c.Tier("free")
	fmt.Printf("free: broken(down)=%d\n", free.Broken[metrics.ReasonDown])
	fmt.Printf("total broken=%d\n", c.Total().BrokenTotal())
	// Output:
	// gold: hits=5 misses=1 hit rate=83.3%
	// free: broken(down)=1
	// total broken=1
}

// Recording captures events in order for assertions in tests.
func ExampleRecording() {
	var rec metrics.Recording
	rec.Miss("gold")
	rec.Hit("gold")
	rec.Broken("gold", metrics.ReasonNotCandidate)
	for _, e := range rec.Events() {
		fmt.Println(e)
	}
	fmt.Println("hits:", rec.Hits("gold"))
	// Output:
	// miss tier="gold"
	// hit tier="gold"
	// broken tier="gold" reason=not_candidate
	// hits: 1
}

func ExampleReason() {
	for _, r := range []metrics.Reason{metrics.ReasonDown, metrics.ReasonUnhealthy, metrics.ReasonNotCandidate} {
		fmt.Println(r)
	}
	// Output:
	// down
	// unhealthy
	// not_candidate
}

// TierLabels is the tier folding behind the metric adapters: each kept tier gets one
// payload (here just its label; an adapter keeps its pre-resolved counters), built once.
func ExampleTierLabels() {
	labels, err := metrics.NewTierLabels(metrics.TierLabelsConfig{MaxTiers: 2},
		func(label string) string { return "series{tier=" + label + "}" })
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tier := range []string{"gold", "", "silver", "gold", "\xff"} {
		fmt.Printf("%q -> %s\n", tier, labels.Resolve(tier))
	}
	fmt.Println(labels.Label("bronze")) // full: would be folded; Label creates nothing
	// Output:
	// "gold" -> series{tier=gold}
	// "" -> series{tier=default}
	// "silver" -> series{tier=other}
	// "gold" -> series{tier=gold}
	// "\xff" -> series{tier=other}
	// other
}
