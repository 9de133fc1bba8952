// Package affinitytest holds test helpers for code that embeds an affinity.Scheduler:
// a fake [Clock] that only moves when the test says so.
//
// It is not used by package affinity itself; import it from tests only.
//
// Concurrency: every method of [Clock] is safe for concurrent use. The package has no
// globals and no init.
//
// Usage sketch:
//
//	clk := affinitytest.NewClock(time.Unix(0, 0))
//	s, _ := affinity.New(cfg, affinity.WithClock(clk))
//	s.SelectBackend("sess", "", backends) // miss
//	clk.Advance(30 * time.Minute)          // the binding expires exactly now
package affinitytest
