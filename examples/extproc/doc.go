// Package extproc is an Envoy external-processing (ext_proc) server that acts as an
// endpoint picker (EPP) in the protocol of the Kubernetes Gateway API Inference Extension
// (kubernetes-sigs/gateway-api-inference-extension,
// docs/proposals/004-endpoint-picker-protocol, protocol v1.0.0), so that Envoy — and the
// gateways built on that protocol (kgateway, Istio, llm-d, agentgateway) — can keep every
// turn of an agent session on one inference backend.
//
// It lives in its own module so the examples module does not depend on gRPC and the
// Envoy protos. Routing is the example gateway's ([gateway.Gateway.Decide]): session and
// parent-session headers, tier from the tier header or the body's "model", tenant scope
// and vLLM cache_salt, the affinity Scheduler's decision, health from the gateway's
// prober, and the gateway's /metrics registry.
//
// # Protocol
//
// One gRPC stream per HTTP request, and one routing decision per stream: request headers
// after the request headers (a second request), or request body after the decision, end
// the stream with gRPC InvalidArgument ([ErrSequence]) after the answers already due,
// releasing the decision's lease. Request body or trailers before the request headers
// (never Envoy's order) end it the same way ([ErrNoRequestHeaders]), with no answer
// and no decision: the picker never routes on empty headers. With FULL_DUPLEX_STREAMED request bodies (the mode
// the protocol requires, announced by Envoy in ProcessingRequest.protocol_config) the
// picker holds the request-headers answer back until the body is complete (the model is
// in the body), then answers the headers with
//
//   - header x-gateway-destination-endpoint: <ip:port> (set, overwriting a client value;
//     a backend URL whose host is a name is refused by [New] with [ErrEndpointHost]),
//     clear_route_cache, and
//   - dynamic metadata {"envoy.lb": {"x-gateway-destination-endpoint": "<ip:port>"}}
//     (the same value),
//
// and streams the body back in one chunk (with cache_salt set when tenant.cache_salt
// applies). With BUFFERED bodies it answers the headers at once and puts the same header
// mutation and metadata on the body answer. A request without a body is decided on its
// headers. STREAMED, BUFFERED_PARTIAL and GRPC body modes, and NONE for the request body
// (no body would come, and the decision reads it), are refused with gRPC Unimplemented
// ([ErrUnsupportedMode]); NONE is fine for the response body. When protocol_config is absent (older Envoy),
// FULL_DUPLEX_STREAMED is assumed.
//
// Response headers get X-Agent-Serve-Backend and X-Agent-Serve-Affinity-Hit (nothing on
// a stream without a decision); response
// body chunks pass through unchanged. The request counts as in flight
// (agentserve_extproc_inflight_requests) from the pick until the response stream ends:
// response body or headers with end_of_stream, response trailers, or the stream's end
// or cancellation by Envoy.
//
// Request path: the :path Envoy sends (after its own normalization, when configured) is
// checked as the HTTP gateway checks a request's path ([gateway.CheckPath], also applied
// by [gateway.Gateway.Decide]): a dot segment ("." or "..", raw or percent-encoded, an
// encoded slash "%2F" counting as a slash), an encoded backslash ("%5C"), a raw
// backslash, a byte outside RFC 3986's
// path characters or an invalid percent-encoding, or a :path that does not start with
// "/" ("*") is refused on the request headers with ImmediateResponse 400
// "invalid_path", before any body is read or anything decided. The method is not
// checked: the HTTP gateway refuses CONNECT and TRACE itself, but Envoy handles CONNECT
// on its own (a 404 unless a route has a connect_matcher, which envoy.yaml has not), and
// a backend failure is Envoy's to count. The picker only picks an endpoint (an ip:port): the path the backend gets is
// Envoy's, so Envoy's HttpConnectionManager options are where paths are normalized or
// refused for every route (normalize_path, merge_slashes, path_with_escaped_slashes_action;
// envoy.yaml sets the first two and keeps %2F, which SDKs send in model IDs); the
// picker's check covers an Envoy left at its defaults, which forwards dot segments as
// sent.
//
// Subset hint: when the request's filter metadata has
// "envoy.lb.subset_hint"/"x-gateway-destination-endpoint-subset", only backends whose
// ip:port is in that list are candidates. A hint that is not a list of strings (one
// string instead of a list of one, say) is refused with 400 "invalid_subset_hint"
// naming the hint ([ErrSubsetHint]), not read as an empty subset.
//
// Errors become ImmediateResponses with the gateway's JSON error body (OpenAI's error
// object with Anthropic's top-level "type":"error"; the message without Go package
// prefixes), and the stream ends: 503 when no endpoint is eligible (all Down, or none in the subset), as
// the protocol requires; 400 for a malformed JSON body, an unknown tier or a session ID
// that is too long (or missing on a generation call with require_session); 413 above
// max_body_bytes.
//
// # Configuration keys honoured
//
// The picker reads the gateway's YAML. It honours backends (id, url, weight, tier, drain),
// session_headers, parent_session_headers, require_session, tiers, tenant, health,
// affinity (with load and store), metrics, max_body_bytes, and of limits and timeouts:
//
//   - limits.max_inflight_bytes: each request body is charged as its buffer grows (the
//     first buffer is the first chunk's size, at least 512 bytes; each doubling is
//     charged before it is made) and returned once the decision is sent or the stream
//     ends; over it, ImmediateResponse 503 "overloaded" with Retry-After
//     (limits.retry_after_seconds). Shown in agentserve_gateway_inflight_bytes.
//   - limits.max_inflight_requests: a decision holds one slot until its lease ends (the
//     response stream's end, or the stream's end); over it, 503 "overloaded" with
//     Retry-After. Shown in agentserve_gateway_inflight_requests. A decision that finds
//     no eligible backend gets ImmediateResponse 503 "no_backend_available" with the
//     same Retry-After.
//   - timeouts.read_body_seconds: bounds the time from the stream's start to the
//     decision (headers and body); exceeded, ImmediateResponse 408 "request_timeout".
//   - limits.max_header_bytes: the request headers' names and values plus 4 bytes a line
//     (as in HTTP/1); over it, 431 "request_header_fields_too_large". A header value
//     with a control character other than tab (NUL, CR, LF, DEL...) gets 400
//     "invalid_header", as net/http refuses such requests before the HTTP gateway's
//     session checks.
//
// Not applicable, ignored: listen, the other timeouts (Envoy owns the client and backend
// connections), limits.max_connections (bound gRPC with its own server options),
// retries, outlier detection and passive health (Envoy sees the responses, the picker
// does not). Each rejection counts in agentserve_extproc_requests_total (rejected for
// 4xx, unavailable for 503).
//
// # Decisions where the protocol is silent
//
//   - One endpoint per answer, no fallback list: the binding names one backend, and a
//     retry on another endpoint would leave the binding pointing elsewhere. Envoy's own
//     retries then go to the same endpoint; a failed backend is removed by the prober
//     and the next turn is rebound.
//   - x-gateway-destination-endpoint-served (sent by the data plane with the response
//     headers) is compared with the pick; a difference is counted in
//     agentserve_extproc_served_elsewhere_total and logged at Debug, and the binding is
//     left as it is (with one endpoint per answer it only differs if the proxy overrode
//     the pick).
//   - Leases: each pick is a Scheduler lease (AcquireWithParent, or LeaseBackend for a
//     request without a session, through gateway.Decide), released with the in-flight count above, so load-aware placement
//     sees the picker's outstanding requests. The protocol's 429 is not used.
//   - gRPC health: "", "liveness", "readiness" and
//     "envoy.service.ext_proc.v3.ExternalProcessor" report SERVING while the server runs
//     (there is no leader election); [Server.Register] returns the health server so the
//     command reports NOT_SERVING before a graceful stop.
//
// # Concurrency
//
// A [Server] is safe for concurrent use; grpc-go runs each stream on its own goroutine
// and the picker starts one more per stream, to receive (so the body read timeout can
// end a stream whose client is silent); it ends with the stream. Cost per request: one
// body buffer up to max_body_bytes and the gateway's Decide (one Scheduler call).
package extproc
