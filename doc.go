// Package sessionaffinity is the root of a library that pins each agent session to one
// LLM inference backend (vLLM, SGLang, TGI, ...) so that the backend's prefix/KV cache is
// reused on every later turn.
//
// The root package holds no code. The work is done by its sub-packages:
//
//   - hrw: rendezvous (highest random weight) hashing, the deterministic first placement.
//   - health: the backend health set (Healthy, Draining, Down) and an optional HTTP prober.
//   - metrics: the Recorder interface the scheduler reports to, with in-memory counters.
//   - affinity: the sticky-binding table and the Scheduler that composes the three above.
//
// Integrations live in nested modules so the core keeps one runtime dependency
// (github.com/zeebo/xxh3): metrics/prometheus (a Prometheus Recorder) and examples (a
// gateway, a vLLM simulator, the load study and a production-trace replay).
package sessionaffinity
