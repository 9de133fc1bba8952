// Package gateway is an example HTTP gateway for OpenAI-compatible inference servers
// (vLLM, SGLang, TGI) that embeds an [affinity.Scheduler]: every turn of an agent
// session goes to the backend that served its previous turn, so that backend's prefix
// (KV) cache is reused. It is built on net/http/httputil.ReverseProxy (Rewrite,
// ModifyResponse, ErrorHandler) and is meant to be read and copied as much as run.
//
// It is not a production load balancer: no TLS termination, no authentication, no
// per-client rate limiting (only global in-flight caps). Load-aware placement and spill
// come from the Scheduler's load block (affinity.load), off unless configured.
//
// # Routing a request
//
//  0. CONNECT and TRACE (any case) get a JSON 405 method_not_allowed with an Allow
//     header, before anything else (method.go: a CONNECT reached the backend as
//     "CONNECT /prefix/", and a backend closing on it was ejected). The request path
//     (as sent: the request-target's, r.RequestURI; the query is not checked) must
//     start with "/", hold only RFC 3986 path characters and valid percent-encodings,
//     and have no dot segment ("." or "..", raw or percent-encoded in any case: "%2e",
//     ".%2E"; an encoded slash "%2F" counts as a slash), no encoded backslash ("%5C",
//     any case) and no raw backslash ([CheckPath]); otherwise JSON 400 invalid_path, before the body is read
//     or anything routed or bound. Decision: refuse rather than clean. The path is
//     appended to the backend URL's path, so a dot segment could leave a backend URL's
//     /prefix (tester32); an LLM API client never sends these, and a cleaning proxy
//     reads such a path one way while the backend behind it, decoding, may read it
//     another (path.go has the reasons). A path that passes is forwarded byte for byte.
//  1. The body is read up to max_body_bytes (default 8 MiB; larger: JSON 413), charged to
//     limits.max_inflight_bytes as it arrives (over it: JSON 503 with Retry-After) and
//     kept in memory so a request can be replayed on another backend.
//  2. The body of a POST request must be a JSON object (otherwise JSON 400) when its
//     Content-Type is JSON or absent, or when it goes to an OpenAI JSON endpoint
//     (.../chat/completions, /completions, /embeddings, /responses) with any
//     non-multipart Content-Type; its "model" is read. Other bodies pass unparsed.
//     Decision: the top-level key "model" is matched exactly after unescaping and of
//     duplicate keys the last wins, as encoding/json and
//     Python's json (vLLM) decide, so the tier follows the model the backend serves;
//     a response's "usage" is read the same way.
//     Such a body sent with a Content-Encoding other than identity (any element of
//     any Content-Encoding line counts: "identity" then "gzip" is gzip) gets a JSON 415
//     unsupported_content_encoding with Accept-Encoding: identity (RFC 9110 §15.5.16):
//     the gateway does not decompress request bodies (a decision where the issue was
//     silent: decompression would need its own size limits, and OpenAI-compatible
//     clients send plain JSON).
//  3. The session ID is the value of the first header of session_headers present on
//     the request (see [DefaultSessionHeaders]; the order is the check order). The parent
//     session ID is the first of parent_session_headers ([DefaultParentSessionHeaders]:
//     X-Parent-Session-ID) present. Decision: an empty session_headers list is refused at
//     load ([ErrNoSessionHeaders]: affinity would be off without a word;
//     affinity.sticky_ttl_seconds: 0 says so), and so are Host, Content-Length and
//     hop-by-hop headers as session, parent, tier or tenant headers ([ErrHeaderName]:
//     net/http keeps Host and Transfer-Encoding out of the header map; the others
//     describe the connection or the body). Decision: a name listed twice in
//     session_headers or parent_session_headers is [ErrHeaderName], and a parent
//     header that is also a session header, or a tenant.header that is either, is
//     [ErrHeaderConflict] (a session would be its own parent, or its own tenant: each
//     ran without a word before). With tenant scoping ([TenantConfig]) both are
//     prefixed with a keyed hash of the request's tenant (a request without a tenant
//     identity belongs to one anonymous tenant)
//     ([TenantTagBytes] bytes; affinity.max_session_id_bytes bounds the ID the client
//     sent, checked before the tag is added so an error never shows the tag, and the
//     Scheduler's limit makes room for the tag), and with
//     tenant.cache_salt the JSON body of .../chat/completions and .../completions gets
//     vLLM's "cache_salt" for the tenant.
//     Decision: the salt is spliced into the body's bytes, not decoded and re-encoded:
//     every top-level member whose key, unescaped, is "cache_salt" (duplicates too) is
//     cut with its comma and "cache_salt":"<salt>" is inserted first after the '{';
//     every other byte reaches the backend as sent (key order, whitespace, number
//     spellings, and keys with invalid UTF-8 or lone surrogate escapes, which a
//     re-encode turned into U+FFFD). The salted body is one new buffer of exactly its
//     length, charged to limits.max_inflight_bytes before it is made (a 503 overloaded
//     when it does not fit) and released with the request: an 8 MiB request allocates
//     25.1 MB with cache_salt against 16.7 MB without (the decode/re-encode took 57 MB,
//     none of it charged; BenchmarkServeHTTPCacheSalt). So with cache_salt on,
//     limits.max_inflight_bytes must hold 2 x max_body_bytes + 64 (a body and its
//     salted copy), checked at load: a request that could never fit would otherwise
//     get 503 with Retry-After for ever (with stream_usage on too, 3 x max_body_bytes
//     + 128: the body, the copy that asks for its usage, the salted copy; stream_usage
//     alone: 2 x max_body_bytes + 64). A body not read as JSON (multipart: the rule
//     of step 3's model read) is not salted.
//     A session, parent session, tier or tenant header (Authorization too with
//     tenant.api_key) sent more than once with values that differ (spaces trimmed) is a JSON 400 conflicting_header naming the header,
//     not its values; identical copies pass. Decision: the gateway reads a header's
//     first value, and a proxy in front that reads the last would route or authenticate
//     the same request as another session, tier or tenant.
//  4. The tier is the tier_header value (a header of its own: one that is also a
//     session, parent or tenant header is [ErrHeaderConflict]; it must name a tier the config knows:
//     a backend tier, a model_tiers value or an affinity.tiers key; otherwise JSON 400
//     unknown_tier, whatever the value's length), else model_tiers[model], else "" (the
//     default tier). The value "default" (exactly; the metrics' label of "") names the
//     default tier, over model_tiers, unless the config has a tier of that name. A configured tier name over 255 bytes (affinity.MaxTierBytes) is
//     refused when the configuration loads (ErrTierName), so tier_too_long, the
//     mapping of affinity.ErrTierTooLong, is not reached with a valid configuration.
//  5. The candidates are the backends of that tier; a tier without dedicated backends
//     (for example "" when every backend has a tier, or a tier that only sets a TTL)
//     uses all backends.
//  6. A generation call (POST to a path ending in /chat/completions, /completions,
//     /responses or /messages; a trailing slash is ignored) with a session ID:
//     [affinity.Scheduler.AcquireWithParent] (Acquire when there is no parent header;
//     both decide as SelectBackendWithParent and SelectBackend do, plus the lease and,
//     with load awareness, the load rules) — only these read and write a binding and
//     count a hit or miss.
//     Without a session ID: JSON 400 when require_session is set and the request is a
//     generation call; otherwise the request is routed like "affinity off" — rendezvous
//     hashing over the X-Request-Id header (or a random key) among the candidates that
//     are not Down, storing no binding and counting neither hit nor miss; the request is
//     leased on that backend with affinity.Scheduler.LeaseBackend (load only, see "Load
//     awareness") and its response carries no X-Agent-Serve-Outcome. Any other request
//     with a session ID (GET /v1/models, /v1/embeddings, /tokenize, a path the backend
//     answers 404, a GET to a generation path) is routed the same way keyed by its
//     session ID (tenant-scoped): the backend HRW picks for the session, usually the one
//     its binding names, with no binding read or written, no hit or miss, no
//     X-Agent-Serve-Outcome; its session ID is still held to max_session_id_bytes.
//     Decision: a client sending such a request with a session expects it served, not
//     remembered — a model list or a health probe warms no prefix cache — and binding
//     them let one client flush the binding table (max_bindings, shared by every tenant)
//     cheaply — GET /nonexistent in a loop on one keep-alive connection, each with a
//     fresh session ID — turning every other session's next turn into a miss. The binding is made when a
//     generation call is placed, as the Scheduler decides before the backend answers,
//     and kept whatever its response status (a 503 included) except one: when the
//     placement stored a new binding (outcome miss, rebind or spill) and the backend answered
//     404 or 405, the path does not exist there and the gateway removes that binding
//     again if it still names that backend (Scheduler.ForgetIf, a compare-and-forget: a
//     concurrent turn of the same session that rebound it keeps its binding; counts
//     nothing).
//     Decision: otherwise a loop of POST /nope/completions with fresh session IDs would
//     flush the table like the GET loop above. A valid small generation call still binds:
//     max_bindings is shared by every client and tenant (no per-tenant quota).
//  7. Library errors become JSON errors: session ID too long or tier too long -> 400,
//     no eligible backend -> 503.
//
// Responses carry X-Agent-Serve-Backend and X-Agent-Serve-Affinity-Hit headers. Every
// X-Agent-Serve-* field of a backend's response (101 and 103 included) is removed before
// the gateway sets its own, so a response the gateway sets no X-Agent-Serve-Outcome on
// carries none. Of the client's X-Agent-Serve-* request headers only those the gateway
// reads as input (session, parent, tier and tenant headers: X-Agent-Serve-Tier by
// default) reach the backend; the others are dropped. Decision: the prefix is the
// gateway's, so that a backend, a log or a later hop never takes a client's
// X-Agent-Serve-Backend for the gateway's word (the gateway sets none on the backend
// request today). X-Forwarded-Host is left out when the request has no Host (an
// HTTP/1.0 client may send none) rather than sent empty.
// Non-streaming JSON responses (Content-Type application/json, not compressed, no
// trailers, announced or sent after the body, up to 16 MiB) also get a top-level "x_agent_serve" object {backend, affinity_hit, tier}
// inserted as their first member (see [InjectMetadata]; inject_metadata: false turns
// this off and leaves every body untouched); other responses, in
// particular text/event-stream, pass through untouched and unbuffered (ReverseProxy
// flushes every write of a streaming response; with stream_usage, the one event the
// gateway asked for in the client's place is taken out, see streamusage.go). Errors use the OpenAI shape
// {"error":{"message","type","code"}} plus a top-level "type":"error", which is also the
// Anthropic Messages API's shape.
//
// # Cost per request
//
// The hot path decodes no JSON: one pass over the raw bytes validates a body (as
// json.Valid would) and finds the request's "model", or the response's "usage" and an
// existing "x_agent_serve" key; the metadata is spliced in after the response
// object's '{' without re-encoding the document. Response bodies are assembled in
// pooled buffers and the ReverseProxy copies through pooled 32 KiB buffers
// (httputil.BufferPool); a non-streaming response is written in one piece (no
// per-write flush). Backend connections are kept alive (256 idle per backend). See
// BenchmarkServeHTTP, BenchmarkServeHTTPLoopback (the direct client on a loopback
// socket) and the peer comparison in the README.
//
// # Reload and restart
//
// [Gateway.Reload] (SIGHUP in the command, or [Gateway.WatchConfig]) applies a new
// configuration in place: the routing state (config, backends, tiers, Scheduler, prober)
// is an immutable snapshot swapped atomically, each request uses the one it started
// with, bindings to backends that remain never move (but see tenant scoping below),
// removed backends stop being candidates at once (the reload log's "removed" field lists
// them; their bindings break as not_candidate, a rebind, when their sessions return), and
// a bad config is rejected with a log line while the old one keeps serving. The
// "config reloaded" line also names what changed on each backend that stays:
// weight_changed ("vllm-a:1->2", the effective weight), tier_changed
// ("vllm-b:(default)->large", "(default)" being the default pool) and url_changed, beside drained and undrained; each is empty when
// nothing changed, and each names at most 20 entries, then "+N more" (a reload that
// replaces thousands of backends logged every ID before, 56 KB in one line). A config equal to the serving one is not applied: "config unchanged"
// instead. Each outcome line names its trigger (sighup, watch, api). The config file must
// be a regular file of at most [MaxConfigBytes]; another (a FIFO, a device) is refused
// unread. Decisions:
//
//   - backends[].drain: true drains a backend (affinity.Scheduler.OnBackendDraining):
//     its bound sessions stay, new ones go elsewhere, /readyz and
//     agentserve_backend_state say "draining"; false again undrains it. Applied at start
//     and by a reload that adds the backend or changes the value, never otherwise (a
//     drain an embedder made through Scheduler stays). It is the graceful way out:
//     drain, wait for the sessions to finish or expire, then remove. Health stays
//     independent (Down while failing its checks, Draining again once passing).
//   - An affinity change (sticky TTL, per-tier TTLs, caps) builds a new Scheduler and
//     copies the bindings over through a binding snapshot: backends and remaining TTLs
//     are kept (cut to a shorter new TTL). A session whose first turn lands in the
//     instant between the copy and the swap is bound by HRW, which is where a binding
//     copied a moment later would not override it (a live binding wins).
//   - A new prober (changed health settings, or backends while health.enabled) takes
//     over the old one's view of every backend that keeps its ID, URL and health.path
//     (health.WithStateFrom): its state, its consecutive failure and success counts and
//     its next probe time. So a dead backend goes Down after failure_threshold failed
//     probes and a recovering one comes back after success_threshold passed ones however
//     often the configuration is reloaded, and a reload probes only the backends it adds
//     (at once, or, more than 16 of them, spread over up to one interval), not every one. Decision: "the same backend" is the same probe request
//     (ID, URL and path); anything else is another server and starts afresh. Before, each
//     reload's prober started every backend not held Down Healthy with its count at 0,
//     so a reload every few seconds kept a dead backend in rotation for good. A backend
//     the old prober held Down whose URL changed (another server) or, with health checks
//     now disabled, every one held Down is marked up, with a "backend state change" line.
//   - A change of tenant scoping (turned on or off, tenant.header, tenant.api_key, the
//     secret) changes every binding key, so each session is placed again on its next
//     turn (a miss; a move where HRW picks another backend). The reload is applied and
//     logs one Warn saying so, rather than being refused: turning scoping on is a
//     security fix that should not wait for a restart. The old keys are kept until their
//     TTL, so going back to the previous scoping within it finds them again. A reload
//     that changes the cache_salt vLLM sees (tenant.cache_salt on or off, or with it on
//     a change of scoping) logs one Warn that salted requests' prefix caches go cold;
//     sessions do not move.
//   - `listen` and `admin_listen` cannot change in place: such a reload is rejected
//     ([ErrReloadNeedsRestart]).
//
// [Gateway.Serve] shuts down gracefully: no new connections, in-flight requests get
// drain_seconds (default 10) to finish, then the rest are cut — a request still waiting
// for its backend's response headers, or still uploading its body (then with
// Connection: close), is answered a JSON 503 "shutdown" with Retry-After, event streams first get the error event below (1 s at most is given for
// these), then the connections are closed — each logged at Info as "request cut by the
// shutdown drain" (not as a client that went away; a cut stream or body is counted
// client_closed, as its client got no whole answer); Serve waits 1 s at most for the cut
// handlers to return, so each cut is logged before it returns. A listener that fails
// is drained the same way. Decision: the 503 rather than a closed connection, because
// the OpenAI and Anthropic SDKs read it as their typed error and retry it.
// [Gateway.EndDrain] ends the drain at once. Decision: the command calls it on a second SIGINT or SIGTERM — kill twice =
// now, what operators expect; the bindings are still saved. With binding_snapshot
// set, it saves the binding table to that file on shutdown (written to a temporary file
// and renamed) and loads it on start: remaining TTLs are preserved minus the downtime.
// Decisions (docs/gateway.md, binding_snapshot):
//
//   - A loaded file is consumed (removed), so a crash before the next shutdown save
//     starts empty rather than restore bindings that moved since (each would be a hit on
//     a cold backend); a Serve that fails after the load still saves on the way out. The
//     load is logged when it starts (path, size) and ends (bindings, dropped as expired,
//     duration).
//   - A damaged file, or one that cannot be read, is logged and kept, renamed to
//     <path>.damaged ([DamagedSnapshotSuffix]; an older one is replaced: only the latest
//     evidence is kept, and disk use stays bounded), since the snapshot saved at shutdown
//     would otherwise overwrite it; the gateway starts empty rather than not at all. An
//     unreadable file that cannot be renamed is not saved over (Serve returns an error).
//   - A file over [MaxSnapshotBytes] (max_bindings records of the longest kind the
//     config accepts) is damaged and not read; a smaller one is decoded as it is read.
//   - [New] and [Gateway.Reload] check that the file's directory exists and takes a new
//     file (creating and removing a temporary file there) and that the path is not an
//     existing file other than a snapshot (non-empty, not starting with "SAFSNAP" nor with
//     NUL bytes, which a crash leaves where a file was never written: kept aside as damaged):
//     a bad path is [ErrBindingSnapshot] at start or reload, not bindings or a file lost
//     at shutdown.
//   - Serve holds an exclusive lock on path+[SnapshotLockSuffix] (flock, on Unix) from
//     before the load until after the save; when another process holds it (the gateway
//     being replaced, still draining, or another one given the same path) Serve waits
//     for it, at most drain_seconds + 10 s, then loads what that one saved, or returns
//     [ErrSnapshotInUse] with the file untouched: one gateway per snapshot file.
//   - affinity.max_session_id_bytes is at most [SessionIDBytesCap], the longest
//     session ID a snapshot holds less the tenant tag.
//
// The format is affinity's versioned snapshot (magic "SAFSNAP1", CRC-32C; see
// affinity.Table.Snapshot). With a shared binding store no snapshot is needed.
//
// An event stream (text/event-stream, no Content-Length) the gateway ends before its
// end after its headers went out — the drain's end, the backend closing, resetting or
// garbling it, a stall past stream_idle_seconds — gets one last event, at an event
// boundary (an open event is ended first), and is then aborted as before (no last chunk):
// "event: error" with data {"type":"error","error":{"type":"server_error","code":...,
// "message":...}}, code "shutdown", "backend_closed" or "backend_timeout", so that the
// OpenAI and Anthropic SDKs raise instead of ending well when their HTTP client takes the
// close for the end of the body (Node's fetch does with Connection: close). Not written
// for a client that left, nor when the backend ended the stream. Decisions: streamerr.go.
// Client-facing errors name a backend by its ID and a short reason ("connection
// refused", "timed out", ...), never its address or the Go error (logged instead).
//
// [Gateway.Decide] makes the same decision (steps 2-7) without proxying, for
// integrations that forward requests themselves, such as the Envoy ext_proc endpoint
// picker in examples/extproc. [Gateway.ReserveBytes] and [Gateway.AcquireRequest] (with
// their Release counterparts) let such an integration hold the bodies and requests it
// serves against limits.max_inflight_bytes and limits.max_inflight_requests, shown in
// the same gauges.
//
// # Health
//
// Active: with health.enabled (the default: a config without a health block probes), a
// [health.Prober] polls GET <url><health.path> on every backend and drives
// [affinity.Scheduler.OnHealthChange] (failure_threshold consecutive failures -> Down,
// success_threshold successes -> Healthy again). Each backend is probed once per
// interval at its own offset within it, on a transport of the prober's own that keeps
// one connection per backend from one probe to the next (docs/gateway-health.md).
//
// Passive (outlier.go, passive.go, progress.go, timeouts.go): outlier detection modelled
// on Envoy's. A 5xx extends a backend's 5xx streak; a connection failure on a fresh
// connection, a dial timeout, a response-header timeout or a stalled stream (these two
// only when the backend showed no progress meanwhile), a response body the backend cuts
// while the client is still there, and a response that is not valid HTTP
// ([ErrBadResponse], answered 502 backend_bad_response) extend its connection-failure
// streak; a response below 500 whose body has been read to its end resets both. A streak
// reaching its threshold within window_seconds ejects the backend
// ([affinity.Scheduler.OnBackendDown]: bindings broken with reason "down") for
// base_ejection_seconds x the number of its ejections, capped at max_ejection_seconds,
// unless max_ejection_percent of the backends are ejected already; when the time is over,
// [Gateway.RecheckPassive] brings it back after one 2xx from its health path.
//
// Retries (retry_on_connect_error, default true) follow net/http.Transport's rule: only a
// request that never reached the backend or a replayable one (idempotent method or
// Idempotency-Key header) is sent again. A keep-alive connection the backend had closed
// is retried once on the same backend and not counted; after a counted failure the
// request goes, this once, to the session's next HRW choice among the other eligible
// backends, and once more, to a third backend not tried yet, when that retry too fails
// to connect with nothing sent (maxRetryBackends: a dead backend not yet marked Down
// behind another).
//
// What each outcome counts as, the progress rule for timeouts, the retry rules and the
// decisions behind them are described in docs/gateway-health.md (in the repository).
//
// # Limits and timeouts
//
// Decision: a request body is charged as it arrives, not by its Content-Length: its
// buffer starts at min(Content-Length, 64 KiB) (512 bytes when chunked) and doubles up to
// the Content-Length or max_body_bytes, each growth charged before it is made. A client
// that announces 8 MiB and sends one byte holds 64 KiB, so slow clients cannot fill the
// budget with bytes they never send; the price is that, with the budget full, a large
// upload may be cut part-way with the 503 instead of refused before it starts.
//
// Decision: a client that stops part-way holds (and is charged) at most twice what it
// sent — the buffer last doubled — and never more than its Content-Length. Reading into
// 64 KiB chunks instead would hold what was sent plus one chunk, but a body of several
// chunks must then be copied into one buffer at the end, holding it twice over for that
// moment, uncharged, where the last doubling holds it one and a half times (a buffer
// allocated before the body's end always trades the one against the other). Tried: the
// e2e flood test under -race (TestBodyFloodMemory, TestBodyFloodMemoryCacheSalt) then
// peaked at 101-129 MiB of heap against 82-88 MiB, over its bound of the budget plus 40
// MiB; so the buffer still doubles.
//
// Request bodies and buffered responses are charged to limits.max_inflight_bytes, and
// proxied requests to limits.max_inflight_requests; beyond either the client gets a
// JSON 503 "overloaded" with Retry-After.
//
// Decision: a request counts toward limits.max_inflight_requests once its body has been
// read in full (a request without a body: on arrival), not while it uploads. Counted on
// arrival, 1,025 clients announcing 8 MiB and sending a few bytes held every slot for
// read_body_seconds and everyone else got the 503; slow uploads are bounded instead by
// limits.max_connections, read_body_seconds and the byte budget. The price: a client may
// upload a whole body and then be refused with the 503 when the slots are full. Downstream, [Gateway.HTTPServer] sets
// ReadHeaderTimeout, IdleTimeout and MaxHeaderBytes; the body read has its own deadline
// (read_body_seconds, then JSON 408). See [TimeoutsConfig] and [LimitsConfig].
//
// # Load awareness (leases)
//
// Generation calls with a session are placed by affinity.Scheduler.Acquire (cost =
// request body bytes / 4) instead of SelectBackend; with affinity.load absent the decisions are the
// same. With a parent session header it is affinity.Scheduler.AcquireWithParent: with
// affinity.load on (and spilling not disabled) a subagent's first turn goes to its
// parent's backend only if that backend passes the spill guard (idle, waiting at most
// spill_cost_weight x the parent's prefix, or within the bound: the affinity package's
// rule 21), else it is placed like a new session. Requests without a session (and other requests with one, step 6) are leased
// too, by affinity.Scheduler.LeaseBackend on
// the backend they are hashed to: their load counts for load-aware placement and in
// [MetricOutstandingRequests] and [MetricOutstandingCost], and nothing is bound or
// counted as a hit or miss (Decision: no X-Agent-Serve-Outcome header for them, as
// before: they have no placement outcome). The lease is released when the response body
// has been copied and closed — the end of a JSON response or SSE stream, a client
// cancel, a backend error — with the usage of the JSON body or of the last SSE chunk
// carrying one. A chat/completions or completions stream carries it only when the
// request asks (stream_options.include_usage); with stream_usage on, the gateway asks
// for clients that do not and takes the usage-only chunk back out of their stream
// (streamusage.go). A retry on another backend
// releases the failed attempt's lease first (Done with the attempt's error) and then
// leases the backend it goes to, so its outstanding load and its usage are booked there,
// and X-Agent-Serve-Backend, X-Agent-Serve-Affinity-Hit and X-Agent-Serve-Outcome describe
// the attempt that served the response. A lease whose request failed ends with the
// error — a body the backend cut, a stall, a 502 or 504 answered by the gateway — so
// Done books no usage for it. A retry that keeps the session's binding (the
// failure did not eject the backend) is leased by affinity.Scheduler.LeaseBackend on
// the backend it goes to: no decision, nothing stored, moved, broken or counted; it is
// reported as Outcome "miss" and AffinityHit false; a retry after an ejection is placed again on the request's own tier (usually a miss: the
// ejection broke the binding). With load_report_seconds > 0, [Gateway.Run] also reads each backend's
// vLLM queue gauges (as [Gateway.ReportLoads] does), each backend on its own schedule,
// at most 20 at once (12 for the backends that answer, 4 for those that fail, 4 for
// first scrapes, which time out after 1 s and may take 4 idle answering workers too),
// Down backends skipped, schedules and reports kept across reloads,
// and a report older than 3 intervals logged at Warn and counted by
// [MetricLoadReportsStale] (docs/load-aware.md, "Load report scrapes"). A lease belongs to the Scheduler that made
// it: after a reload that replaces the Scheduler (a changed affinity block), requests
// already in flight (and their retries) lease and release their load on the old one.
// [MetricOutstandingRequests] and [MetricOutstandingCost] still count them until they
// end: the gateway keeps each replaced Scheduler while a request that started on it is
// in flight or one of its leases is open, adds its load at scrape time, and drops it
// after (bounded by the requests in flight). A backend the reload removed (with the
// Scheduler kept or replaced) keeps its two series while such requests are leased on
// it, and loses them once they have ended: the label takes only the backends configured
// now or still draining. Decision: the new Scheduler's load-aware
// placement does not see the requests started before the reload; it starts from its own
// leases and the next load report (seeding it would lease every request twice). See
// lease.go and outstanding.go.
//
// # Metrics
//
// /metrics serves the gateway's own Prometheus registry: the agentserve_affinity_*
// series of the metrics/prometheus adapter, the per-backend [MetricBackendUp],
// [MetricBackendState] and [MetricBackendEjections] (label backend: configured backends
// only), the per-backend outstanding load ([MetricOutstandingRequests],
// [MetricOutstandingCost], same label plus removed backends still draining requests), [MetricRequests] by code_class and source, the
// gateway's own in-flight figures against limits.max_inflight_* ([MetricInflightRequests],
// [MetricInflightBytes], no labels: what [Gateway.InFlight] returns),
// [MetricLoadReportsStale] (no labels), the configuration reloads by result
// ([MetricConfigReloads]) and whether the last one was applied
// ([MetricConfigLastReloadOK]), and the Go and process collectors.
// With `metrics: {exporter: otel}` the affinity counters are recorded by the
// metrics/otel adapter on an OpenTelemetry SDK MeterProvider whose only reader is the
// OTel Prometheus exporter on the same registry (offline, no collector, no goroutine):
// same series names plus the otel_scope_* labels and target_info.
//
// code_class (client_closed, backend_closed beside the status classes) and what each
// failure mode counts as are described in docs/gateway-metrics.md (in the repository).
//
// /healthz answers {"status":"ok"} for the gateway itself (liveness); /readyz answers 503
// {"status":"not_ready"} when no backend can take requests, 200 otherwise, with every
// backend's state; under [Gateway.Serve] it answers 503 {"status":"starting"} while the
// binding snapshot loads and 503 {"status":"draining"} once the shutdown drain has
// begun. With `admin_listen` set, Serve serves these three paths on that address too,
// on an http.Server of its own (short timeouts of its own, at most 64 connections, not
// counted in limits.max_connections), so that slow uploads holding every main
// connection cannot starve the probes or the scrape; it answers through the drain and
// closes after the main server (admin.go). Decision: the paths stay on `listen` as well
// (backward compatible). The three are read-only: on either listener a method other
// than GET and HEAD gets a JSON 405 method_not_allowed with Allow: GET, HEAD (method.go).
// Every state change the gateway causes is logged ("backend state
// change": backend, from, to, why) at the level of the state reached: Warn for down and
// "down (ejected)", Info for healthy or draining (a recovery, a drain or undrain, the end
// of an ejection), as Envoy and HAProxy log a server going down above one coming back.
//
// # Backend client
//
// `backend_client: direct` (the default) sends requests to http:// backends through the
// gateway's own HTTP/1.1 keep-alive pool, parsed on the handler's goroutine (no
// per-connection goroutines); https:// backends and Upgrade requests go through a
// net/http.Transport, and `backend_client: nethttp` restores it for all. A 101 Switching
// Protocols answer is tunnelled (tunnel.go). The pool's rules, the decisions where it
// differs from net/http, the timeouts' timers and the upgrade tunnel are described in
// docs/gateway-backend-client.md (in the repository).
//
// # Front server
//
// `server: direct` makes [Gateway.Serve] serve its listener with the gateway's own
// HTTP/1.x server (internal/h1: one goroutine per connection, net/http's request parser,
// its server's checks and response framing, no per-request background read);
// `server: nethttp`, the default, keeps net/http's http.Server ([Gateway.HTTPServer]).
// Under direct a client leaving mid-request cancels its request within about 75 ms of
// the request's start rather than at once (see [ServerDirect]); everything else the
// handler relies on (write deadlines, Flush, trailers, Hijack for tunnels, the drain's
// 503 and SSE error answers) behaves the same, and the connection-level tests run over
// both.
//
// # Socket I/O
//
// On Linux the TCP connections [Gateway.Serve] accepts and those the backend clients dial
// (both `backend_client` values) read and write through internal/rawio: raw system calls,
// with the network poller's waits, deadlines and errors unchanged. A plain read or write
// wakes the Go runtime's sysmon thread whenever every P was idle, which at low
// concurrency is between any two requests: rawio takes the gateway from about 5.4 to 2.5
// context switches per request at concurrency 1 (HAProxy: 2.1) and cuts 24-41 %
// of its CPU per request there (docs/peers.md). Not configurable; under the race
// detector the calls are plain ones again (see internal/rawio).
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
