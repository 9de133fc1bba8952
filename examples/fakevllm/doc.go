// Package fakevllm is a SIMULATOR of an OpenAI-compatible vLLM server, for tests, demos
// and load studies of session affinity. It runs no model and generates no meaningful text:
// it only models what matters for affinity — an automatic prefix cache and the time a
// cache miss costs. Everything it serves says so: the X-Fakevllm: simulator header, the
// "[fakevllm simulator]" marker starting every completion, the owned_by of /v1/models and
// the help text of every /metrics series. Numbers measured against it are simulator
// numbers, not vLLM benchmarks.
//
// It is not a vLLM client, proxy or tokenizer; it ignores sampling parameters (temperature,
// top_p, n, stop, tools' semantics …) and always returns one choice.
//
// # Routes
//
//   - POST /v1/chat/completions: JSON body as in the OpenAI API (messages, model,
//     max_tokens or max_completion_tokens, stream, stream_options.include_usage, tools).
//     Non-streaming answers a chat.completion object; with "stream": true it answers
//     text/event-stream chunks "data: {chat.completion.chunk}\n\n", each flushed: a role
//     chunk, one chunk per output token, a chunk with finish_reason, a usage chunk (empty
//     choices) when stream_options.include_usage is true, then "data: [DONE]\n\n".
//     usage has prompt_tokens, completion_tokens, total_tokens and
//     prompt_tokens_details.cached_tokens (like vLLM with prefix caching on and
//     --enable-prompt-tokens-details); with Config.NoPromptTokensDetails
//     prompt_tokens_details is null (vLLM's default, that flag off).
//   - GET /v1/models: the configured model.
//   - GET /health: 200 with an empty body; 503 after [Server.SetHealthy](false).
//   - GET /metrics: Prometheus text from the Server's own registry:
//     vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total (in tokens),
//     vllm:prompt_tokens_total, vllm:generation_tokens_total,
//     vllm:num_requests_running, vllm:num_requests_waiting and fakevllm_simulator_info,
//     all labelled model_name and backend (Config.ID).
//
// Errors are OpenAI-style JSON {"error":{"message","type","param","code"}}: malformed JSON,
// missing messages or roles, out-of-range max_tokens -> 400; a wrong method -> 405 (with
// Allow); a body over [MaxRequestBodyBytes] -> 413; an unknown path -> 404. Bad input never
// panics.
//
// # Token rule and prompt template
//
// The prompt is the request rendered by [RenderPrompt] (a ChatML-like template, documented
// there). Its token count is ceil(bytes/4) ([EstimateTokens], [BytesPerToken]). Output
// tokens = max_completion_tokens, else max_tokens, else Config.DefaultMaxTokens.
//
// # Prefix cache
//
// The prompt is cut into full blocks of Config.BlockTokens tokens (BlockTokens*4 bytes);
// a trailing partial block is never cached. Block i is keyed by the hash chain
// key_i = SHA-256(key_{i-1} || bytes of block i) (key_{-1} = 32 zero bytes, or
// SHA-256("cache_salt" 0x00 salt) when the request has vLLM's cache_salt), so a block's
// key identifies the whole prefix up to it. A request's cached_tokens is BlockTokens times
// the number of leading blocks found in the cache (prefix semantics: a block counts only if
// all earlier ones hit), capped so at least the last block is computed when the whole
// prompt is cached (cached_tokens < prompt_tokens), as in vLLM. The lookup happens when the
// request gets a slot; all its full blocks are inserted after its prefill. The cache is an
// LRU of at most Config.CacheBlocks blocks; a request's blocks are touched last to first,
// so tails are evicted before the prefixes they extend.
//
// # Latency model
//
// A request waits in a FIFO queue for one of Config.MaxConcurrent slots, then sleeps
// (prompt_tokens - cached_tokens) * PrefillPerToken * TimeScale (prefill), then
// completion_tokens * DecodePerToken * TimeScale (decode; streaming sleeps per token before
// each chunk). If the request's context ends (client gone) while queued or sleeping, the
// request stops and frees its slot. Waits use [WithSleep]'s function (tests inject a no-op).
//
// # Concurrency
//
// A [Server] is safe for concurrent use and starts no goroutines; each request runs on the
// net/http goroutine serving it. Stats and metrics are atomic counters read on demand.
//
// # Usage
//
//	srv, err := fakevllm.New(fakevllm.Config{ID: "b1", TimeScale: 0.01})
//	if err != nil { … }
//	ts := httptest.NewServer(srv)   // or http.Server{Handler: srv}
//	defer ts.Close()
//	// POST ts.URL + "/v1/chat/completions" with any OpenAI client; read srv.Stats().
//
// The command examples/cmd/fake-vllm serves one on a port.
package fakevllm
