package gateway

import (
	"net/http"
)

// stream_usage (Config.StreamUsage): streamed chat/completions and completions turns
// report their usage to load awareness even when the client did not ask for it.
//
// vLLM (and OpenAI) end an event stream of POST /v1/chat/completions or /v1/completions
// with a usage-only chunk (`"choices":[]` and the usage object, just before
// `data: [DONE]`) only when the request asks with "stream_options":
// {"include_usage": true}. Many clients do not, and then the lease of every streamed
// turn ends without usage: the Scheduler never learns the session's prompt size nor its
// cached prefix. With stream_usage on, the gateway asks in the client's place and drops
// that chunk from the stream it forwards, so the client sees the stream it would have
// seen without the gateway.
//
// The request (streamUsageEdit): only a POST to a path ending in /chat/completions or
// /completions (a trailing slash ignored) whose body is a JSON object read as one
// (parseModel's rule) and whose last top-level "stream" is true. Then, by its last
// top-level "stream_options":
//
//   - absent: `,"stream_options":{"include_usage":true}` is inserted after the last member;
//   - null: replaced by {"include_usage":true};
//   - an object without "include_usage": `"include_usage":true` is added as its last
//     member; with "include_usage" false or null (the last of duplicates): that value
//     becomes true;
//   - anything else is left alone: include_usage already true (the client asked: nothing
//     is dropped from its stream either), include_usage of another type, stream_options
//     not an object (the backend rejects such a request as it would have), or
//     "continuous_usage_stats": true without include_usage true (decision: vLLM would
//     then put a usage object into every chunk, which the gateway does not strip).
//
// Every other byte of the body is kept (one copy of it, charged to
// limits.max_inflight_bytes before it is made, like the tenant.cache_salt copy; a body
// that does not fit gets the 503 overloaded), the Content-Length follows, and retries
// resend the same body. The request is rewritten before tenant.cache_salt is applied.
// Gateway.Decide (ext_proc) does not ask: the gateway does not see that response, so it
// could not take the chunk back out.
//
// The response (usageDrop): when the gateway asked and the answer is text/event-stream,
// an event that is one "data:" line — its JSON an object whose last top-level "choices"
// is [] and whose "usage" is not null — and the blank line ending it is not forwarded;
// its usage reaches the lease as any other (leaseBody.scan reads the stream before it is
// filtered). Everything else goes through byte for byte, in order. To look at an event
// whole, the bytes of an event not yet complete at the end of a backend read are held
// until the read that completes it (an SSE client dispatches an event only at its blank
// line anyway): with vLLM, which writes each event in one piece, nothing waits. An event
// still incomplete after maxHeldEvent bytes (4 KiB; the usage chunk is a few hundred
// bytes), or after half the reader's buffer (ReverseProxy's is 32 KiB), is forwarded as
// it comes, unchecked, and so is one the stream leaves unfinished at its end. Lines
// end with LF, CRLF or a lone CR (the SSE grammar). A backend that ignores the option
// sends no such chunk: nothing is dropped and the turn books no usage, as without
// stream_usage. The response loses its Content-Length, if it had one (an event stream
// normally has none).

// streamUsageBody returns body asking for stream usage when stream_usage is on and r is
// a streaming chat/completions or completions request that does not ask yet (top: the
// scan of body by parseModel), and asked true; otherwise body unchanged and false. The
// new body is charged to charge before it is allocated (nil: not charged); a refusal is
// errOverBudget.
func (rt *routing) streamUsageBody(r *http.Request, body []byte, top topMembers, charge func(n int64) bool) ([]byte, bool, error) {
	if !rt.cfg.StreamUsage || r.Method != http.MethodPost || !isSaltEndpoint(r.URL.Path) {
		return body, false, nil
	}
	e, ok := streamUsageEdit(body, top)
	if !ok {
		return body, false, nil
	}
	n := len(body) - (e.end - e.at) + len(e.ins)
	if charge != nil && !charge(int64(n)) {
		return nil, false, errOverBudget
	}
	out := make([]byte, 0, n)
	out = append(append(out, body[:e.at]...), e.ins...)
	return append(out, body[e.end:]...), true, nil
}

// bodyEdit replaces body[at:end] with ins.
type bodyEdit struct {
	at, end int
	ins     string
}

// streamUsageEdit returns the edit of body that makes it ask for stream usage, and
// whether there is one (the rules above). top is scanJSON's result for body (top.close 0:
// not a JSON object, no edit). Cost: a scan of the stream_options object's members when
// there is one; 0 allocs.
func streamUsageEdit(body []byte, top topMembers) (bodyEdit, bool) {
	if top.close == 0 || string(top.stream) != "true" {
		return bodyEdit{}, false
	}
	opts, at := top.streamOpts, top.streamOptsAt
	switch {
	case opts == nil: // "stream" is a member: a comma first
		end := lastValueEnd(body, top.open, top.close)
		return bodyEdit{end, end, `,"stream_options":{"include_usage":true}`}, true
	case string(opts) == "null":
		return bodyEdit{at, at + len(opts), `{"include_usage":true}`}, true
	case opts[0] != '{':
		return bodyEdit{}, false
	}
	if v, found := member(opts, 0, "continuous_usage_stats"); found && string(v) == "true" {
		if v, found := member(opts, 0, "include_usage"); !found || string(v) != "true" {
			return bodyEdit{}, false
		}
	}
	v, found := member(opts, 0, "include_usage")
	switch {
	case !found:
		end := lastValueEnd(opts, 0, len(opts)-1)
		if end == 1 { // {} or { }: the first member
			return bodyEdit{at + 1, at + 1, `"include_usage":true`}, true
		}
		return bodyEdit{at + end, at + end, `,"include_usage":true`}, true
	case string(v) == "false" || string(v) == "null":
		vat := at + cap(opts) - cap(v) // v is a subslice of opts
		return bodyEdit{vat, vat + len(v), "true"}, true
	}
	return bodyEdit{}, false // true already, or not a boolean
}

// lastValueEnd returns the index just past the last member's value of the valid JSON
// object b[open:close+1] (open+1 when it has none): close with the whitespace before it
// skipped.
func lastValueEnd(b []byte, open, close int) int {
	i := close
	for i > open+1 && isWS(b[i-1]) {
		i--
	}
	return i
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
