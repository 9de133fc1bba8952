package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"strconv"
)

func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	st := routeFrom(pr.In.Context())
	b, _ := st.current()
	pr.SetURL(b.url)
	pr.SetXForwarded()
	// The body is already read in full (the gateway answered the client's Expect:
	// 100-continue itself, when it read it): asking the backend for a 100 as well would
	// relay a second "100 Continue" to the client. Canonical key: no canonicalization.
	delete(pr.Out.Header, "Expect")
	if len(st.body) > 0 {
		// ReverseProxy wraps the body in a reader net/http does not recognize as
		// in-memory, which makes the Transport flush the headers before the body: two
		// writes per request. Hand it the buffered body itself: one write. The reader is
		// the outgoing request's own, not the route's: net/http.Transport may still read it
		// from its write goroutine after RoundTrip returned (an early response), and
		// nothing reachable from the route (kept alive by an idle connection's context)
		// holds the body once releaseBody has run. It must stay io.NopCloser over a
		// *bytes.Reader, which net/http knows is in memory: a reader type of our own
		// would bring back the early flush (TestRewriteBodyOneWrite).
		pr.Out.Body = io.NopCloser(bytes.NewReader(st.body))
	}
}

func (g *Gateway) modifyResponse(resp *http.Response) error {
	st := routeFrom(resp.Request.Context())
	if st == nil {
		return nil
	}
	b, hit := st.current()
	// Canonical keys assigned directly: no canonicalization per response. The values live
	// in st (headerSlot): ReverseProxy copies them into the client's header map.
	resp.Header[HeaderBackend] = st.headerSlot(0, b.id)
	resp.Header[HeaderAffinityHit] = st.headerSlot(1, strconv.FormatBool(hit))
	st.setOutcome(resp.Header)
	st.forgetNewBinding(g, b, resp.StatusCode)
	if leaseTunnel(st, resp) { // 101 Switching Protocols (tunnel.go)
		return nil
	}
	if !st.rt.cfg.injectMetadata() || !injectable(resp) || !g.reserve(st, injectCost(resp)) {
		wrapLease(st, resp, nil)
		return nil // not JSON, or over the in-flight byte budget: pass through unbuffered
	}
	pool := &g.bufs
	in := pool.Get()[:0]
	data, err := readInto(in, resp.Body, maxInjectBytes)
	if errors.Is(err, errTooLarge) { // too large to rewrite: pass through unchanged
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
		wrapLease(st, resp, nil)
		return nil
	}
	if err != nil {
		// The read error was logged at Warn with the backend where it happened (idleBody,
		// or the stall timer) unless the client went away: proxyError answers it without
		// a second line. The lease ends here, with the error.
		pool.Put(data)
		err = fmt.Errorf("gateway: reading backend response: %w", err)
		st.release(usage{}, err)
		return warnedError{err}
	}
	_ = resp.Body.Close()
	out := pool.Get()[:0]
	var u usage
	if top, obj, _ := scanJSON(data); obj { // one pass: validity, usage, an existing key
		u = usageValue(top.usage)
		if !top.meta {
			out = appendInjected(out, data, top.open, b.id, hit, st.tier)
		}
	}
	if len(out) == 0 { // not a JSON object, or already has the key: unchanged
		out = append(out, data...)
	}
	pool.Put(data)
	pb := &st.pb
	pb.buf, pb.pool = out, pool
	pb.r.Reset(out)
	resp.Body = pb
	wrapLease(st, resp, &u)
	resp.ContentLength = int64(len(out))
	resp.Header["Content-Length"] = st.headerSlot(3, strconv.Itoa(len(out)))
	resp.TransferEncoding = nil
	return nil
}

// appendInjected appends body with `"x_agent_serve":{...},` spliced in right after the
// object's '{' at body[open] (body must be a valid JSON object without that key).
func appendInjected(dst, body []byte, open int, backend string, hit bool, tier string) []byte {
	dst = append(dst, body[:open+1]...)
	dst = append(dst, `"`+MetadataKey+`":`...)
	dst = appendMetadata(dst, backend, hit, tier)
	if rest := body[open+1:]; body[skipWS(body, open+1)] != '}' {
		dst = append(dst, ',')
		dst = append(dst, rest...)
	} else {
		dst = append(dst, rest...)
	}
	return dst
}

// mediaType is mime.ParseMediaType's media type, without its allocations for the
// Content-Type values every OpenAI-compatible server sends.
func mediaType(ct string) (string, error) {
	switch ct {
	case "application/json", "application/json; charset=utf-8":
		return "application/json", nil
	case "text/event-stream", "text/event-stream; charset=utf-8":
		return "text/event-stream", nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	return mt, err
}

// injectCost is what buffering resp for InjectMetadata is charged to the in-flight
// byte budget: twice its length (the body and its rewritten copy), twice maxInjectBytes
// when the length is unknown.
func injectCost(resp *http.Response) int64 {
	if resp.ContentLength >= 0 && resp.ContentLength <= maxInjectBytes {
		return 2 * resp.ContentLength
	}
	return 2 * maxInjectBytes
}

// injectable reports whether resp is a non-streaming, uncompressed JSON response.
func injectable(resp *http.Response) bool {
	if resp.Request != nil && resp.Request.Method == http.MethodHead {
		return false
	}
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return false
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return false
	}
	mt, err := mediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	return mt == "application/json"
}

// InjectMetadata inserts `"x_agent_serve": meta` as the first member of the JSON
// object in body, keeping the rest byte for byte. It returns body unchanged and
// false when body is not a valid JSON object or already has the key at top level.
// meta must be valid JSON. Cost: O(len(body)): one pass that validates body as json.Valid
// does and finds its top-level keys, no decoding; one allocation (the result, about
// len(body)+len(meta) bytes). Safe for concurrent use. The gateway itself does the same
// into pooled buffers.
func InjectMetadata(body, meta []byte) ([]byte, bool) {
	top, obj, _ := scanJSON(body)
	if !obj || top.meta {
		return body, false
	}
	open := top.open
	out := make([]byte, 0, len(body)+len(meta)+len(MetadataKey)+4)
	out = append(out, body[:open+1]...)
	out = append(out, '"')
	out = append(out, MetadataKey...)
	out = append(out, '"', ':')
	out = append(out, meta...)
	if body[skipWS(body, open+1)] != '}' {
		out = append(out, ',')
	}
	out = append(out, body[open+1:]...)
	return out, true
}
