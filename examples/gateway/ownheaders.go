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
