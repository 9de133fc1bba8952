// Package gateway is an example HTTP gateway for OpenAI-compatible inference servers
// (vLLM, SGLang, TGI) that embeds an [affinity.Scheduler]: every turn of an agent
// session goes to the backend that served its previous turn, so that backend's prefix
// (KV) cache is reused. It is built on net/http/httputil.ReverseProxy (Rewrite,
// ModifyResponse, ErrorHandler) and is meant to be read and copied as much as run.
//
// It is not a production load balancer: no TLS termination, no authentication, no
// rate limiting, no load-aware spill-over.
//
// # Routing a request
//
//  1. The body is read up to max_body_bytes (default 8 MiB; larger: JSON 413) and kept
//     in memory so a request can be replayed once on another backend.
//  2. The body of a POST request must be a JSON object (otherwise JSON 400) when its
//     Content-Type is JSON or absent, or when it goes to an OpenAI JSON endpoint
//     (.../chat/completions, /completions, /embeddings, /responses) with any
//     non-multipart Content-Type; its "model" is read. Other bodies pass unparsed.
//  3. The session ID is the value of the first header of session_headers present on
//     the request (see [DefaultSessionHeaders]; the order is the check order).
//  4. The tier is the tier_header value (it must name a tier the config knows:
//     a backend tier, a model_tiers value or an affinity.tiers key; otherwise JSON 400),
//     else model_tiers[model], else "" (the default tier).
//  5. The candidates are the backends of that tier; a tier without dedicated backends
//     (for example "" when every backend has a tier, or a tier that only sets a TTL)
//     uses all backends.
//  6. With a session ID: [affinity.Scheduler.SelectBackend]. Without one: JSON 400 when
//     require_session is set; otherwise the request is routed like "affinity off" —
//     rendezvous hashing over the X-Request-Id header (or a random key) among the
//     candidates that are not Down, storing no binding and counting neither hit nor miss.
//  7. Library errors become JSON errors: session ID too long or tier too long -> 400,
//     no eligible backend -> 503.
//
// Responses carry X-Agent-Serve-Backend and X-Agent-Serve-Affinity-Hit headers.
// Non-streaming JSON responses (Content-Type application/json, not compressed, up to
// 16 MiB) also get a top-level "x_agent_serve" object {backend, affinity_hit, tier}
// inserted as their first member (see [InjectMetadata]); other responses, in
// particular text/event-stream, pass through untouched and unbuffered
// (FlushInterval -1). Errors use the OpenAI shape {"error":{"message","type","code"}}.
//
// # Health
//
// Active: with health.enabled, a [health.Prober] polls GET <url><health.path> on every
// backend and drives [affinity.Scheduler.OnHealthChange] (failure_threshold consecutive
// failures -> Down, success_threshold successes -> Healthy again).
//
// Passive: when a backend refuses or resets the connection, or closes it before any
// response byte, the gateway calls [affinity.Scheduler.OnBackendDown] (its bindings are
// broken with reason "down") and, with retry_on_connect_error (default true), replays
// the request once on the next choice (SelectBackend again, now that the failed backend
// is Down). Nothing has reached the client at that point. A passively downed backend is
// re-checked every health.passive_recheck_seconds with one GET on its health path and
// comes back (OnBackendUp) on a 2xx, unless the active prober currently holds it Down,
// in which case the prober's own recovery decides. So passive checking works with or
// without the active prober. Bindings never fail back: sessions that moved stay moved.
//
// # Metrics
//
// /metrics serves the gateway's own Prometheus registry: the agentserve_affinity_*
// series of the metrics/prometheus adapter plus the Go and process collectors.
// /healthz answers {"status":"ok"} for the gateway itself.
//
// # Concurrency and lifetime
//
// A [Gateway] is safe for concurrent use. [New] starts nothing; [Gateway.Run] runs the
// prober and the passive re-check until its context is done; [Gateway.Serve] and
// [Gateway.ListenAndServe] serve HTTP and call Run, and shut down gracefully when the
// context is done; [Gateway.Close] releases idle backend connections.
//
// Usage:
//
//	cfg, err := gateway.LoadConfig("configs/gateway.yaml")
//	if err != nil { ... }
//	g, err := gateway.New(cfg, gateway.WithLogger(logger))
//	if err != nil { ... }
//	err = g.ListenAndServe(ctx) // returns after ctx is cancelled and in-flight requests finish
package gateway
