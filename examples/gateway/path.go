package gateway

import (
	"fmt"
	"net/http"
	"strings"
)

// Request paths: the gateway forwards a request's path as the client sent it, appended
// to the backend URL's path (backends[].url's /prefix), so it refuses the paths whose
// meaning a later hop could change (tester32: `/v1/../../admin/...` reached the
// backend's /admin/ through a backend URL ending in /tenant-a).
//
// Decision: refuse, not clean. An LLM API client (the OpenAI and Anthropic SDKs, vLLM's
// clients, coding agents) builds fixed paths such as /v1/chat/completions and never
// sends a dot segment (but see relative model IDs below). It does send an
// encoded slash: the SDKs' models.retrieve("meta-llama/Llama-3.1-8B-Instruct") asks for
// GET /v1/models/meta-llama%2FLlama-3.1-8B-Instruct (tester34; Hugging Face-style model
// IDs are the norm on vLLM), so %2F passes, forwarded as sent, and counts as a slash for
// the dot-segment rule: whichever hop decodes it, no ".." segment appears. The one ID
// so refused is a relative path ("./models/llama", vLLM's default ID for `vllm serve
// ./models/llama`): serve it under --served-model-name (docs/gateway.md).
// Cleaning instead would make the gateway one more hop with its own reading of the
// path: removing dot segments before or after percent-decoding, treating %2F and \ as
// separators or not, gives different paths, and a proxy that cleans one way in front of
// a backend that decodes another is the classic way past a path prefix. nginx, for one,
// decodes and resolves the URI for its location matching but passes the client's
// original URI on when proxy_pass has no URI part; Envoy normalizes only when
// normalize_path is set, and keeps %2F and %5C as they are by default
// (path_with_escaped_slashes_action). A 400 leaves no path for the two hops to disagree on.

// ErrInvalidPath is wrapped by the error of [CheckPath]; it wraps [ErrRequest]. The
// gateway answers such a request with a 400 "invalid_path".
var ErrInvalidPath = fmt.Errorf("%w: invalid path", ErrRequest)

// CheckPath reports whether rawPath, a request path exactly as sent on the wire (the
// request-target's path: see [Gateway.ServeHTTP]; not r.URL.Path, which has %2F decoded
// into a separator, nor r.URL.EscapedPath(), which re-escapes the decoded path when it
// does not round-trip), is one the gateway forwards. It returns an error wrapping
// [ErrInvalidPath] (and [ErrRequest]) when the path
//
//   - is not empty and does not start with "/" (the asterisk-form "*", an authority),
//   - has a byte RFC 3986 does not allow in a path (section 3.3: only unreserved
//     characters, sub-delims, ":", "@", "/" and percent-encodings; so no space,
//     control byte, non-ASCII byte, `"`, "#", "<", ">", "[", "]", "^", "`", "{", "|", "}"),
//     or a "%" not followed by two hex digits,
//   - has a dot segment ("." or ".." between slashes or at either end, RFC 3986 section
//     3.3; the segments its section 5.2.4 removes), raw or percent-encoded in any case
//     ("%2e", "%2E", ".%2e", ...), where an encoded slash ("%2f", "%2F") counts as a
//     slash too ("/a%2F..%2Fb" has one),
//   - has an encoded backslash ("%5c", "%5C"), or
//   - has a raw backslash,
//
// nil otherwise. The message names the problem and quotes at most 64 bytes of the
// path. The query is not part of the path and is not checked; neither are empty
// segments ("//"), nor segments that only start or end with dots ("...", ".well-known",
// "..;"). [Gateway.ServeHTTP] and [Gateway.Decide] call it before anything else of the
// request is read. Cost: one pass over the path, no allocation when it passes. Safe for
// concurrent use.
//
// Decision (tester33): a path with a byte outside RFC 3986's set is refused rather than
// checked and forwarded raw. net/http keeps such a path only decoded (r.URL.RawPath is
// dropped when it is not a valid encoding), so "/v1/chat%2Fcompletions|" reached the
// backend re-escaped as "/v1/chat/completions%7C": the encoded slash had become a
// separator. A path made of RFC 3986's characters alone is one net/http keeps as sent
// (r.URL.EscapedPath() returns it byte for byte), so every path this check accepts is
// forwarded exactly as the client wrote it, after the backend URL's path, and no second
// spelling of it exists for the check to miss. LLM API clients send fixed ASCII paths;
// a client with another byte in its path can percent-encode it.
func CheckPath(rawPath string) error {
	if rawPath != "" && rawPath[0] != '/' {
		return pathError(rawPath, `no leading "/" (only a path in origin form is forwarded)`)
	}
	dots, other := 0, false // in the current segment: '.' count, and whether it has anything else
	for i := 0; ; {
		if i == len(rawPath) || rawPath[i] == '/' {
			if !other && (dots == 1 || dots == 2) {
				return pathError(rawPath, `a dot segment ("." or "..", raw or percent-encoded)`)
			}
			if i == len(rawPath) {
				return nil
			}
			dots, other = 0, false
			i++
			continue
		}
		switch c := rawPath[i]; {
		case c == '.':
			dots++
			i++
		case c == '%':
			if i+2 >= len(rawPath) || !isHex(rawPath[i+1]) || !isHex(rawPath[i+2]) {
				return pathError(rawPath, `a "%" not followed by two hex digits`)
			}
			switch hi, lo := rawPath[i+1], rawPath[i+2]|0x20; {
			case hi == '2' && lo == 'e':
				dots++
			case hi == '2' && lo == 'f': // a separator to whoever decodes it: ends a segment too
				if !other && (dots == 1 || dots == 2) {
					return pathError(rawPath, `a dot segment ("." or "..", raw or percent-encoded)`)
				}
				dots, other = 0, false
			case hi == '5' && lo == 'c':
				return pathError(rawPath, `an encoded backslash ("%5C")`)
			default:
				other = true
			}
			i += 3
		case c == '\\':
			return pathError(rawPath, "a backslash")
		case isPathChar(c):
			other = true
			i++
		default:
			return pathError(rawPath, "a byte RFC 3986 does not allow in a path (percent-encode it)")
		}
	}
}

// isPathChar reports whether RFC 3986 allows c raw in a path segment, other than '%'
// and '.' (handled apart): unreserved, sub-delims, ':' and '@' (pchar, section 3.3).
func isPathChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_~!$&'()*+,;=:@", c) >= 0
}

// requestPath returns the path of r's request-target as the client sent it: the part
// of r.RequestURI before any "?" for the origin form ("/v1/models?x"), the path of the
// absolute form ("http://host/v1/models?x": "/v1/models"; "" when it has none), and the
// target before any "?" otherwise (the asterisk-form "*", a scheme without an authority
// such as "x:/v1/..." or "x:foo", an authority), which CheckPath refuses as it does not
// start with "/": net/http answers "OPTIONS *" itself, "*" with any other method used to
// reach the backend as "/%2A", and "x:foo" as the request line "foo" (tester34). The
// query is cut first, so that a "://" in it is never taken for the absolute form's. A
// request without a RequestURI (not read by a server: the ext_proc picker's, a test's)
// has r.URL.EscapedPath(), or "x" (refused) for an opaque URL. No allocation.
func requestPath(r *http.Request) string {
	t := r.RequestURI
	if t == "" {
		if r.URL.Opaque != "" {
			return "x"
		}
		return r.URL.EscapedPath()
	}
	t, _, _ = strings.Cut(t, "?")
	if t == "" || t[0] == '/' {
		return t
	}
	scheme, rest, ok := strings.Cut(t, "://")
	if !ok || scheme == "" || strings.Contains(scheme, "/") {
		return t // not the absolute form: refused
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:] // the absolute form's path, after its authority
	}
	return ""
}

// checkRequestPath is CheckPath on r's path as sent (requestPath) and, when r.URL's
// escaped path is another string — r.URL was changed after the server parsed it, by
// http.StripPrefix for one — on that too: it is the one forwarded.
func checkRequestPath(r *http.Request) error {
	raw := requestPath(r)
	if err := CheckPath(raw); err != nil {
		return err
	}
	if esc := r.URL.EscapedPath(); esc != raw {
		return CheckPath(esc)
	}
	return nil
}

func pathError(p, what string) error {
	return fmt.Errorf("%w: the path has %s: %q", ErrInvalidPath, what, truncate(p, 64))
}
