package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
)

func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	st := routeFrom(pr.In.Context())
	b, _ := st.current()
	pr.SetURL(b.url)
	st.rt.stripOwnRequestHeaders(pr.Out.Header) // ownheaders.go
	st.setXForwarded(pr)
	if _, ok := pr.Out.Header["User-Agent"]; !ok {
		// What ReverseProxy would set after rewrite (no Go default User-Agent), in a slot.
		pr.Out.Header["User-Agent"] = st.headerSlot(slotUserAgent, "")
	}
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

// setXForwarded sets the X-Forwarded-For, X-Forwarded-Host and X-Forwarded-Proto
// headers of pr.Out as httputil.ProxyRequest.SetXForwarded does, with their values in
// st's header slots instead of three new slices.
func (st *route) setXForwarded(pr *httputil.ProxyRequest) {
	h := pr.Out.Header
	if clientIP, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 { // ReverseProxy removed the client's: not reached
			clientIP = strings.Join(prior, ", ") + ", " + clientIP
		}
		h["X-Forwarded-For"] = st.headerSlot(slotForwardedFor, clientIP)
	} else {
		delete(h, "X-Forwarded-For")
	}
	if pr.In.Host != "" {
		h["X-Forwarded-Host"] = st.headerSlot(slotForwardedHost, pr.In.Host)
	} else { // an HTTP/1.0 request without Host: no empty field (tester32)
		delete(h, "X-Forwarded-Host")
	}
	proto := "http"
	if pr.In.TLS != nil {
		proto = "https"
	}
	h["X-Forwarded-Proto"] = st.headerSlot(slotForwardedProto, proto)
}

func (g *Gateway) modifyResponse(resp *http.Response) error {
	st := routeFrom(resp.Request.Context())
	if st == nil {
		return nil
	}
	b, hit := st.current()
	// Only the gateway says where a request went: a backend's own X-Agent-Serve-* fields
	// (a forged X-Agent-Serve-Outcome on a response the gateway sets none on) go (ownheaders.go).
	stripOwnHeaders(resp.Header)
	stripOwnTrailers(resp) // and as trailers (ownheaders.go)
	// No Content-Type from the backend: none from the gateway either. A present key with
	// no value stops both servers from sniffing one from the first body bytes (net/http's
	// rule); ReverseProxy copies only the fields the backend sent.
	if _, ok := resp.Header["Content-Type"]; !ok && st.ow.ResponseWriter != nil {
		st.ow.Header()["Content-Type"] = nil
	}
	// Trailers the backend sends undeclared come with the end of the body (ServeHTTP
	// removes the own ones after the copy): possible on a body of unknown length, or
	// over HTTP/2.
	st.trailers = resp.ContentLength < 0 || resp.ProtoMajor >= 2
	// Canonical keys assigned directly: no canonicalization per response. The values live
	// in st (headerSlot): ReverseProxy copies them into the client's header map.
	resp.Header[HeaderBackend] = st.headerSlot(slotBackend, b.id)
	resp.Header[HeaderAffinityHit] = st.headerSlot(slotHit, strconv.FormatBool(hit))
	st.setOutcome(resp.Header)
	st.forgetNewBinding(g, b, resp.StatusCode)
	if leaseTunnel(st, resp) { // 101 Switching Protocols (tunnel.go)
		return nil
	}
	if !st.rt.cfg.injectMetadata() || !injectable(resp) || !g.reserve(st, injectCost(resp)) {
		wrapLease(st, resp, nil)
		st.handOver(resp)
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
		st.handOver(resp)
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
	// Trailers the backend did not announce are known only now, at the end of the body:
	// then the body goes out unchanged and chunked, so that ReverseProxy forwards them, as
	// for announced ones (injectable) — but for X-Agent-Serve-* ones, which it would
	// declare now.
	stripOwnHeaders(resp.Trailer)
	trailers := len(resp.Trailer) > 0
	out := pool.Get()[:0]
	var u usage
	if top, obj, _ := scanJSON(data); obj { // one pass: validity, usage, an existing key
		u = usageValue(top.usage, st.usageAPI()) // top-level in every API's JSON body
		if !top.meta && !trailers {
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
	if !trailers {
		resp.ContentLength = int64(len(out))
		replaceField(resp.Header, "Content-Length", st.headerSlot(slotContentLength, strconv.Itoa(len(out))))
		resp.TransferEncoding = nil
	}
	st.handOver(resp)
	return nil
}

// handOver moves the fields of resp's header, a response that ModifyResponse accepts,
// into the client's header map, where httputil.ReverseProxy would copy them next with
// one Header.Add — a new one-value slice — per value. It does what that copy does
// (canonical keys, values appended to any already there, fields without values not
// created), with the response's own slices. Content-Type goes too, unless ReverseProxy
// still needs it: after ModifyResponse it reads it to flush an event stream on every
// write (flushInterval, which parses it into a new map), but a response of unknown length
// is flushed so anyway; only an event stream with a Content-Length keeps its
// Content-Type in resp.Header (ReverseProxy then copies it). Call it last: resp.Header
// has lost the fields afterwards. Not for a 101, whose header ReverseProxy forwards
// itself, nor for a response ModifyResponse rejects, whose header must not reach the
// client.
func (st *route) handOver(resp *http.Response) {
	if st.ow.ResponseWriter == nil {
		return // not served through ServeHTTP (a test's route): ReverseProxy copies them
	}
	keepType := false
	if resp.ContentLength >= 0 {
		mt, _ := mediaType(resp.Header.Get("Content-Type")) // flushInterval's test
		keepType = mt == "text/event-stream"
	}
	src, dst := resp.Header, st.ow.Header()
	for k, vv := range src {
		if keepType && k == "Content-Type" {
			continue
		}
		delete(src, k)
		if len(vv) == 0 {
			continue
		}
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if have, ok := dst[ck]; ok {
			dst[ck] = append(have, vv...)
		} else {
			dst[ck] = vv
		}
	}
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

// injectable reports whether resp is a non-streaming, uncompressed JSON response
// without trailers. A response that announces trailers (resp.Trailer, or a Trailer
// header) is forwarded as is, chunked with its trailers, as httputil.ReverseProxy does:
// the injected body would carry a Content-Length and lose them.
func injectable(resp *http.Response) bool {
	if resp.Request != nil && resp.Request.Method == http.MethodHead {
		return false
	}
	if len(resp.Trailer) > 0 || len(resp.Header["Trailer"]) > 0 {
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
