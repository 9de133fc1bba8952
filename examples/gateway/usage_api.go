package gateway

import "strings"

// usageAPI is the shape of the usage object a generation endpoint answers with, chosen by
// the request path (usageAPIOf). Each maps to the gateway's usage as follows:
//
//   - apiChat (.../chat/completions, .../completions, and any other path): the OpenAI
//     Chat/Completions object {prompt_tokens, completion_tokens,
//     prompt_tokens_details {cached_tokens}}, top-level in a JSON body or an SSE chunk.
//   - apiResponses (.../responses, the OpenAI Responses API: Codex CLI): {input_tokens,
//     output_tokens, input_tokens_details {cached_tokens}}, top-level in a JSON body and
//     nested under "response" in the SSE events that carry the response object
//     (response.created and response.in_progress with "usage": null, then
//     response.completed, response.incomplete or response.failed with the counts).
//     input_tokens is the whole prompt, cached tokens included.
//   - apiMessages (.../messages, the Anthropic Messages API: Claude Code):
//     {input_tokens, output_tokens, cache_read_input_tokens,
//     cache_creation_input_tokens}, top-level in a JSON body and in the message_delta
//     event, nested under "message" in message_start. input_tokens excludes both cache
//     counts (Anthropic's contract): prompt = input_tokens + cache_read_input_tokens +
//     cache_creation_input_tokens, cached = cache_read_input_tokens, reported only when
//     cache_read_input_tokens is a number. A server that leaves the cache counts out and
//     puts the whole prompt in input_tokens (vLLM before its Anthropic cache-usage fix,
//     or without --enable-prompt-tokens-details) gives the right prompt size, with the
//     cached count unreported.
type usageAPI uint8

const (
	apiChat usageAPI = iota
	apiResponses
	apiMessages
)

// usageAPIOf returns the usage shape of a response to path (a trailing slash ignored,
// as in generationCall): apiResponses for a path ending in /responses, apiMessages for
// /messages, apiChat otherwise. No allocation.
func usageAPIOf(path string) usageAPI {
	p := strings.TrimSuffix(path, "/")
	switch {
	case strings.HasSuffix(p, "/responses"):
		return apiResponses
	case strings.HasSuffix(p, "/messages"):
		return apiMessages
	}
	return apiChat
}

// usageAPI returns the usage shape of st's responses, by the client's request path.
func (st *route) usageAPI() usageAPI {
	if st.in == nil || st.in.URL == nil {
		return apiChat
	}
	return usageAPIOf(st.in.URL.Path)
}

// eventUsage returns the raw usage object of data, a JSON object (a response body or the
// data of one SSE event) answered in api's shape: its top-level "usage" member, or for
// apiResponses the "usage" of its top-level "response" object, for apiMessages that of
// its top-level "message" object, when it has no top-level one; nil if none or data is
// not a valid JSON object. Cost: one pass over data (scanJSON), and a scan of the keys
// of the nested object when there is one; 0 allocs.
func eventUsage(data []byte, api usageAPI) []byte {
	top, obj, _ := scanJSON(data)
	if !obj {
		return nil
	}
	if top.usage != nil || api == apiChat {
		return top.usage
	}
	key := "response"
	if api == apiMessages {
		key = "message"
	}
	if o, found := member(data, top.open, key); found && len(o) > 0 && o[0] == '{' {
		if u, found := member(o, 0, "usage"); found {
			return u
		}
	}
	return nil
}

// usageOf decodes the usage of data, a JSON response body or SSE event data, in api's
// shape (eventUsage, usageValue). Zero if there is none or it is malformed. 0 allocs.
func usageOf(data []byte, api usageAPI) usage {
	return usageValue(eventUsage(data, api), api)
}

// usageValue decodes v, the raw value of a "usage" member of a valid JSON object (nil:
// absent), in api's shape: zero if it is absent, not an object, or a count in it is not a
// non-negative integer (what decoding it into int64 fields with encoding/json would
// reject, negative counts aside). A cached count that is absent or null (or whose
// details object is absent, null or not an object) is left unreported. No decoding, 0
// allocs.
func usageValue(v []byte, api usageAPI) usage {
	switch api {
	case apiResponses:
		return openAIUsage(v, "input_tokens", "output_tokens", "input_tokens_details")
	case apiMessages:
		m, ok := messagesCounts(v)
		if !ok {
			return usage{}
		}
		return m.usage()
	}
	return openAIUsage(v, "prompt_tokens", "completion_tokens", "prompt_tokens_details")
}

// openAIUsage decodes an OpenAI usage object whose prompt and completion counts are the
// members prompt and completion and whose cached count is details.cached_tokens.
func openAIUsage(v []byte, prompt, completion, details string) usage {
	if len(v) == 0 || v[0] != '{' {
		return usage{}
	}
	var u usage
	_, ok := tokenCount(v, 0, prompt, &u.PromptTokens)
	if _, ok2 := tokenCount(v, 0, completion, &u.CompletionTokens); !ok2 {
		ok = false
	}
	if d, found := member(v, 0, details); ok && found && len(d) > 0 && d[0] == '{' {
		u.CachedReported, ok = tokenCount(d, 0, "cached_tokens", &u.CachedTokens)
	}
	if !ok {
		return usage{}
	}
	return u
}

// anthropicCounts are the counts of an Anthropic usage object, each with whether it was
// there (a number; absent or null: not).
type anthropicCounts struct {
	input, output, read, create     int64
	hasIn, hasOut, hasRead, hasCrea bool
}

// messagesCounts decodes an Anthropic usage object; ok is false when v is not an object
// or a count in it is not a non-negative integer.
func messagesCounts(v []byte) (m anthropicCounts, ok bool) {
	if len(v) == 0 || v[0] != '{' {
		return m, false
	}
	for _, f := range [...]struct {
		key string
		dst *int64
		has *bool
	}{
		{"input_tokens", &m.input, &m.hasIn},
		{"output_tokens", &m.output, &m.hasOut},
		{"cache_read_input_tokens", &m.read, &m.hasRead},
		{"cache_creation_input_tokens", &m.create, &m.hasCrea},
	} {
		if *f.has, ok = tokenCount(v, 0, f.key, f.dst); !ok {
			return anthropicCounts{}, false
		}
	}
	return m, true
}

// overlay returns m with the counts that o has replacing m's: a stream's message_delta
// usage (o) over its message_start usage (m). Anthropic sends the prompt counts in
// message_start and the output count (and, lately, all counts again) in message_delta;
// vLLM sends the prompt count in both and the cache counts only in message_delta.
func (m anthropicCounts) overlay(o anthropicCounts) anthropicCounts {
	if o.hasIn {
		m.input, m.hasIn = o.input, true
	}
	if o.hasOut {
		m.output, m.hasOut = o.output, true
	}
	if o.hasRead {
		m.read, m.hasRead = o.read, true
	}
	if o.hasCrea {
		m.create, m.hasCrea = o.create, true
	}
	return m
}

// usage maps Anthropic counts to the gateway's usage (see apiMessages).
func (m anthropicCounts) usage() usage {
	return usage{PromptTokens: m.input + m.read + m.create, CompletionTokens: m.output,
		CachedTokens: m.read, CachedReported: m.hasRead}
}

// messagesStreamUsage returns the usage of an Anthropic Messages event stream: the usage
// of its first event carrying one (message_start, first) overlaid with that of its last
// (message_delta, last); either may be nil, or the same line.
func messagesStreamUsage(first, last []byte) usage {
	m, ok := messagesCounts(eventUsage(first, apiMessages))
	if d, ok2 := messagesCounts(eventUsage(last, apiMessages)); ok2 {
		m, ok = m.overlay(d), true
	}
	if !ok {
		return usage{}
	}
	return m.usage()
}

// tokenCount stores the integer member key of the object at obj[open] in *dst and reports
// whether it was present (absent or null: false, *dst left zero); ok is false when it is
// something else than a non-negative integer.
func tokenCount(obj []byte, open int, key string, dst *int64) (present, ok bool) {
	v, found := member(obj, open, key)
	if !found || string(v) == "null" {
		return false, true
	}
	if len(v) == 0 || len(v) > 18 {
		return false, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return false, false
		}
		n = n*10 + int64(c-'0')
	}
	if n > maxTokenCount {
		return false, false
	}
	*dst = n
	return true, true
}

// maxTokenCount is the largest token count a usage object may carry (2^32, far beyond
// any context window); a larger one is malformed, so that a broken or hostile backend
// cannot push the token totals toward overflow (the Messages prompt adds three counts).
const maxTokenCount = 1 << 32
