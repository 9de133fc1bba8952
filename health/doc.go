// Package health tracks the health of inference backends — [Healthy], [Draining] or
// [Down] — for the affinity Scheduler, and offers an optional active HTTP [Prober].
//
// A [Set] maps backend IDs to a [State]. Any ID it was not told about is Healthy, so
// only Draining and Down IDs take memory. Lookups on the request path ([Set.State],
// [Set.AllHealthy]) are lock-free and allocation-free: they read an immutable map through
// an atomic pointer, which writers (rare: a health change) replace with a modified copy.
// Every change that takes effect is reported as a [Transition] to subscribers
// ([Set.Subscribe]), one at a time, in order, and outside any lock, so a subscriber may
// call back into the Set.
//
// A [Prober] is for users without a health checker of their own: it sends GET URL+Path
// (default "/health", which vLLM, SGLang and TGI serve) to every [Target] each interval
// and turns FailureThreshold consecutive failures into Healthy -> Down and
// SuccessThreshold consecutive successes into Down -> Healthy (defaults 3 and 2). It runs
// in the caller's goroutine ([Prober.Run] until the context is done, or one round at a
// time with [Prober.ProbeOnce]) and reports transitions to a [WithObserver] callback.
// [Check], the one-shot GET a Prober runs per target and round, is exported for callers
// that need a single check (e.g. re-checking a backend they marked Down themselves).
//
// What it is not: a service-discovery client, a passive (request-error based) outlier
// detector, or a load balancer. It has no globals, no init and no hidden goroutines.
//
// Concurrency: every exported method is safe for concurrent use.
//
// Usage sketch:
//
//	sched, _ := affinity.New(cfg)
//	p, err := health.NewProber(health.ProbeConfig{}, []health.Target{
//		{ID: "vllm-0", URL: "http://10.0.0.5:8000"},
//		{ID: "vllm-1", URL: "http://10.0.0.6:8000"},
//	}, health.WithObserver(sched.OnHealthChange))
//	if err != nil { ... }
//	go p.Run(ctx) // stops when ctx is done
//
// Users with their own health checker call the Scheduler's OnBackendDown/OnBackendUp
// directly, or mark a [Set] and subscribe to it.
package health
