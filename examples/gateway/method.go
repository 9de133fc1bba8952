package gateway

import (
	"net/http"
	"strings"
)

// Request methods: the gateway proxies API requests, not tunnels, so it refuses CONNECT
// and TRACE itself with a JSON 405 "method_not_allowed" and an Allow header, before the
// body is read or anything is routed, bound or counted against a backend. Every other
// method is forwarded.
//
// CONNECT (tester33): net/http hands a CONNECT in authority-form ("CONNECT host:port")
// to the handler with an empty path, and the reverse proxy sent it to the backend as
// "CONNECT /prefix/", which is no valid request: a backend that closes the connection on
// it (Node's http server does) gave the gateway a connection failure, three of which in
// a row ejected the backend for outlier detection and broke its bindings — any client
// could eject every backend up to max_ejection_percent. Tunnels through the gateway are
// protocol upgrades (tunnel.go), never CONNECT.
//
// TRACE. Decision: refused too. A backend that implements it reflects the request it
// got in its body — the headers the gateway adds included (X-Forwarded-For, and any a
// deployment adds in front) — which is what TRACE is for and no LLM API client needs;
// nginx answers TRACE with 405 itself for the same reason. Both names are matched in any
// case ("connect" is another method per RFC 9110, section 9.1, but a lenient backend
// may read it as CONNECT).
//
// The ops paths (/metrics, /healthz, /readyz) are answered before this check, and reach
// no backend. Decision (small2; they used to answer any method, CONNECT and TRACE
// included, on both listeners): they are read-only, so they serve GET and HEAD only and
// answer any other method (POST, OPTIONS, CONNECT, TRACE, a lower-case "get", ...) with
// a JSON 405 method_not_allowed and Allow: GET, HEAD, on the main and the admin listener
// alike. Nothing is written through them, so there is no write method to allow.

// allowedMethods is the Allow header of the 405: the methods the gateway forwards. Any
// other extension method is forwarded too; RFC 9110 (section 10.2.1) lets Allow list
// the ones worth naming.
const allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// opsMethods is the Allow header of the ops paths' 405: they are read-only.
const opsMethods = "GET, HEAD"

// refusedMethod reports whether the gateway refuses method (CONNECT or TRACE, any case).
// No allocation.
func refusedMethod(method string) bool {
	switch len(method) {
	case len(http.MethodConnect):
		return strings.EqualFold(method, http.MethodConnect)
	case len(http.MethodTrace):
		return strings.EqualFold(method, http.MethodTrace)
	}
	return false
}

// refuseMethod writes the JSON 405 method_not_allowed with its Allow header.
func refuseMethod(w http.ResponseWriter, method string) {
	w.Header().Set("Allow", allowedMethods)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
		"method "+truncate(method, 16)+" is not allowed: the gateway forwards API requests, not CONNECT or TRACE")
}

// refuseOpsMethod writes the JSON 405 method_not_allowed of an ops path (path) asked
// with a method other than GET or HEAD, with its Allow header.
func refuseOpsMethod(w http.ResponseWriter, method, path string) {
	w.Header().Set("Allow", opsMethods)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
		"method "+truncate(method, 16)+" is not allowed on "+path+": it is read-only (GET, HEAD)")
}
