// Package metrics is the small, pluggable surface through which the affinity Scheduler
// reports what it does: affinity hits, misses, broken bindings (with a [Reason]) and
// evictions, each labelled with the tier only — never a session or backend ID.
//
// It holds:
//
//   - [Recorder], the four-method interface the Scheduler calls (outside its locks);
//   - [UsageRecorder], an optional extension a Recorder may also implement to receive the
//     token usage reported when a load-aware lease ends (prompt and cached prompt tokens
//     of affinity hits); the Scheduler finds it with a type assertion, so adding it broke
//     no existing Recorder. Counters, Recording and the Prometheus adapter implement it;
//   - [Noop], a Recorder that does nothing (the default when none is configured);
//   - [Counters], in-memory atomic per-tier counters with a [Counters.Snapshot] and
//     [Counters.Total] (usable with expvar, a /debug page, or in tests); a hit costs no
//     allocation and no lock on the steady path;
//   - [Recording], a test helper that logs every event in order, for users' tests.
//   - [TierLabels], the tier folding shared by the metric adapters (Prometheus,
//     OpenTelemetry): an allow-list or the first N distinct tiers keep their label, the
//     empty tier is "default", everything else "other"; a known tier resolves to its
//     pre-built payload lock-free with 0 allocs. Use it when writing your own adapter.
//
// What it is not: a Prometheus client. The core module has no Prometheus dependency; the
// Prometheus adapter (counters agentserve_affinity_*_total with a tier label, broken_total
// with tier and reason, and the agentserve_affinity_bindings gauge) lives in the nested
// module github.com/agentserve/sessionaffinity/metrics/prometheus, which implements
// [Recorder].
// The package has no globals and no init; importing it has no side effects.
//
// Concurrency: every type here is safe for concurrent use; [Recorder] implementations
// must be, and must not block.
//
// Usage sketch:
//
//	c := metrics.NewCounters(metrics.WithMaxTiers(16))
//	sched, err := affinity.New(cfg, affinity.WithRecorder(c))
//	...
//	t := c.Total()
//	fmt.Printf("hit rate %.1f%%\n", 100*t.HitRate())
//
// In tests, pass a *[Recording] and assert on [Recording.Events] or [Recording.Hits].
package metrics
