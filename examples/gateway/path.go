package gateway

import "fmt"

// Request paths: the gateway forwards a request's path as the client sent it, appended
// to the backend URL's path (backends[].url's /prefix), so it refuses the paths whose
// meaning a later hop could change (tester32: `/v1/../../admin/...` reached the
// backend's /admin/ through a backend URL ending in /tenant-a).
//
// Decision: refuse, not clean. An LLM API client (the OpenAI and Anthropic SDKs, vLLM's
// clients, coding agents) builds fixed paths such as /v1/chat/completions and never
// sends a dot segment or an encoded slash, so a refusal costs no real client anything.
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

// CheckPath reports whether escapedPath, a request path as sent on the wire — pass
// r.URL.EscapedPath(), not r.URL.Path, which has %2F decoded into a separator — is one
// the gateway forwards. It returns an error wrapping [ErrInvalidPath] (and [ErrRequest])
// when the path has
//
//   - a dot segment ("." or ".." between slashes or at either end, RFC 3986 section
//     3.3; the segments its section 5.2.4 removes), raw or percent-encoded in any case
//     ("%2e", "%2E", ".%2e", ...),
//   - an encoded slash or backslash ("%2f", "%2F", "%5c", "%5C"), or
//   - a raw backslash,
//
// nil otherwise. The message names the problem and quotes at most 64 bytes of the
// path. The query is not part of the path and is not checked; neither are empty
// segments ("//"), nor segments that only start or end with dots ("...", ".well-known",
// "..;"). [Gateway.ServeHTTP] and [Gateway.Decide] call it before anything else of the
// request is read. Cost: one pass over the path, no allocation when it passes. Safe for
// concurrent use.
func CheckPath(escapedPath string) error {
	dots, other := 0, false // in the current segment: '.' count, and whether it has anything else
	for i := 0; ; {
		if i == len(escapedPath) || escapedPath[i] == '/' {
			if !other && (dots == 1 || dots == 2) {
				return pathError(escapedPath, `a dot segment ("." or "..", raw or percent-encoded)`)
			}
			if i == len(escapedPath) {
				return nil
			}
			dots, other = 0, false
			i++
			continue
		}
		switch c := escapedPath[i]; {
		case c == '.':
			dots++
			i++
		case c == '\\':
			return pathError(escapedPath, "a backslash")
		case c == '%' && i+2 < len(escapedPath):
			switch hi, lo := escapedPath[i+1], escapedPath[i+2]|0x20; {
			case hi == '2' && lo == 'e':
				dots++
				i += 3
			case hi == '2' && lo == 'f', hi == '5' && lo == 'c':
				return pathError(escapedPath, `an encoded slash or backslash ("%2F" or "%5C")`)
			default:
				other = true
				i++
			}
		default:
			other = true
			i++
		}
	}
}

func pathError(p, what string) error {
	return fmt.Errorf("%w: the path has %s: %q", ErrInvalidPath, what, truncate(p, 64))
}
