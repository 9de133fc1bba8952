// Package health tracks the health of inference backends — [Healthy], [Draining] or
// [Down] — for the affinity Scheduler, and offers an optional active HTTP [Prober].
//
// A [Set] keeps two facts per backend ID and the [State] they give: observed health,
// reported by health checks ([Set.Observe]), and the operator's drain ([Set.Drain],
// [Set.Undrain]). The effective state is Down if observed down, else Draining if drained,
// else Healthy: a drained backend that fails and then passes its checks is Draining
// again, and only an explicit undrain ends a drain. Any ID it was not told about is
// Healthy, so only drained or observed-down IDs take memory; [Set.Retain] and
// [Set.Forget] drop backends no longer configured. Lookups on the request path ([Set.State],
// [Set.AllHealthy]) are lock-free and allocation-free: they read an immutable map through
// an atomic pointer, which writers (rare: a health change) replace with a modified copy:
// O(IDs stored) per write, so k IDs marked one call at a time cost O(k²) (about 0.2 s
// for 3,000, see [Set]); [Set.Retain] forgets any number in one write.
// Every change of the effective state is reported as a [Transition] to subscribers
// ([Set.Subscribe]), one at a time, in order, and outside any lock, so a subscriber may
// call back into the Set.
//
// A [Prober] is for users without a health checker of their own: it sends GET URL+Path
// (default "/health", which vLLM, SGLang and TGI serve) to every [Target] once per
// interval, each at its own offset within the interval, and turns FailureThreshold
// consecutive failures into Healthy -> Down and SuccessThreshold consecutive successes
// into Down -> Healthy (defaults 3 and 2). It runs in the caller's goroutine
// ([Prober.Run] until the context is done, one step of its schedule at a time with
// [Prober.ProbeDue], or one full round with [Prober.ProbeOnce]) and reports its verdicts
// to [WithReporter] callbacks (its first verdict on every target, then every change, so a
// replacing Prober converges the receiver to its own view) and its transitions to
// [WithObserver] callbacks. A replacing Prober built [WithStateFrom] the old one keeps the
// targets' states, consecutive counts and schedule.
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
//	}, health.WithReporter(sched.Observe))
//	if err != nil { ... }
//	go p.Run(ctx) // stops when ctx is done
//	// operator: sched.OnBackendDraining("vllm-1") ... sched.Undrain("vllm-1")
//	// reload: np, err := health.NewProber(cfg, newTargets, health.WithReporter(sched.Observe),
//	// health.WithStateFrom(p)) (keeps the states, counts and schedule of the targets that
//	// stay, and retires p); cancel p's ctx, sched.Health().Retain(newIDs), go np.Run(ctx2)
//
// Users with their own health checker call the Scheduler's OnBackendDown/OnBackendUp
// directly, or mark a [Set] and subscribe to it.
package health
