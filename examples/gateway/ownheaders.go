package gateway

import (
	"net/http"
	"strings"
)

// ownHeaderPrefix starts the names of the gateway's own headers (X-Agent-Serve-Backend,
// -Affinity-Hit, -Outcome on responses; X-Agent-Serve-Tier, the default tier header, on
// requests).
const ownHeaderPrefix = "X-Agent-Serve-"

// isOwnHeader reports whether the header name k starts with ownHeaderPrefix, in any
// case.
func isOwnHeader(k string) bool {
	return len(k) >= len(ownHeaderPrefix) && strings.EqualFold(k[:len(ownHeaderPrefix)], ownHeaderPrefix)
}

// stripOwnHeaders deletes every X-Agent-Serve-* field of h (a backend's response
// header: only the gateway says where a request went).
func stripOwnHeaders(h http.Header) {
	for k := range h {
		if isOwnHeader(k) {
			delete(h, k)
		}
	}
}

// stripOwnRequestHeaders deletes the X-Agent-Serve-* fields of h (the request going to
// the backend) other than the headers the gateway reads as input (session, parent
// session, tier and tenant headers: rt.checked), which reach the backend as sent.
func (rt *routing) stripOwnRequestHeaders(h http.Header) {
	for k := range h {
		if !isOwnHeader(k) {
			continue
		}
		ck, input := http.CanonicalHeaderKey(k), false
		for _, c := range rt.checked {
			if c.key == ck {
				input = true
				break
			}
		}
		if !input {
			delete(h, k)
		}
	}
}

// stripOwnTrailers removes the X-Agent-Serve-* names from a backend response's
// trailers: from resp.Trailer (the trailers it declared, and, once its body has been
// read to the end, the ones it sent) and from a Trailer field left in resp.Header, so
// that no own name is declared to the client — net/http would send the gateway's own
// header value of a declared name again as a trailer (tester33). Call it in
// ModifyResponse before httputil.ReverseProxy declares the trailers it copies. No
// allocation unless a Trailer field names one of them.
func stripOwnTrailers(resp *http.Response) {
	stripOwnHeaders(resp.Trailer)
	vv, ok := resp.Header["Trailer"]
	if !ok {
		return
	}
	own := false
	for _, v := range vv {
		own = own || containsOwnName(v)
	}
	if !own {
		return
	}
	var keep []string
	for _, v := range vv {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" && !isOwnHeader(name) {
				keep = append(keep, name)
			}
		}
	}
	if len(keep) == 0 {
		delete(resp.Header, "Trailer")
		return
	}
	resp.Header["Trailer"] = []string{strings.Join(keep, ", ")}
}

// containsOwnName reports whether the comma-separated list of field names v has an
// X-Agent-Serve-* name.
func containsOwnName(v string) bool {
	for name := range strings.SplitSeq(v, ",") {
		if isOwnHeader(strings.TrimSpace(name)) {
			return true
		}
	}
	return false
}

// stripSentOwnTrailers deletes from h, the client's response header map after
// httputil.ReverseProxy has copied a response's trailers into it, the X-Agent-Serve-*
// trailers it added with http.TrailerPrefix: trailers the backend sent without
// declaring them, known only at the end of the body, which stripOwnTrailers cannot see.
func stripSentOwnTrailers(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) && isOwnHeader(k[len(http.TrailerPrefix):]) {
			delete(h, k)
		}
	}
}
