package gateway

import (
	"fmt"
	"net/http"
	"strings"
)

// validateHeaders checks the request headers the gateway reads: session_headers (a
// non-empty list), parent_session_headers, tier_header and tenant.header are header
// names it can read a value of (see unreadableHeaders); no name is listed twice in
// session_headers or parent_session_headers (ErrHeaderName); no parent session header
// is a session header, and tenant.header is neither (ErrHeaderConflict: a session would
// be its own parent, or its own tenant); and tier_header is none of the others (nor
// Authorization with tenant.api_key: its bearer key would be taken for a tier name).
func (c Config) validateHeaders() error {
	if len(c.SessionHeaders) == 0 {
		return invalid(ErrNoSessionHeaders, "session_headers: empty list: no request would carry a session ID, "+
			"so affinity would be off; omit the key for the defaults (%s), or set affinity.sticky_ttl_seconds: 0 to turn affinity off",
			strings.Join(DefaultSessionHeaders(), ", "))
	}
	check := func(key, h string) error {
		if !validHeaderName(h) {
			return invalid(ErrHeaderName, "%s: %q: %s", key, h, headerNameProblem(h))
		}
		if why, ok := unreadableHeaders[http.CanonicalHeaderKey(h)]; ok {
			return invalid(ErrHeaderName, "%s: %q: %s; want a request header of its own", key, h, why)
		}
		return nil
	}
	others := make(map[string]string, len(c.SessionHeaders)+len(c.ParentSessionHeaders)+1) // canonical name -> key
	for i, h := range c.SessionHeaders {
		key := fmt.Sprintf("session_headers[%d]", i)
		if err := check(key, h); err != nil {
			return err
		}
		if first, dup := others[http.CanonicalHeaderKey(h)]; dup {
			return invalid(ErrHeaderName, "%s: %q: listed twice (also %s); header names are case-insensitive", key, h, first)
		}
		others[http.CanonicalHeaderKey(h)] = key
	}
	for i, h := range c.ParentSessionHeaders {
		key := fmt.Sprintf("parent_session_headers[%d]", i)
		if err := check(key, h); err != nil {
			return err
		}
		switch first, dup := others[http.CanonicalHeaderKey(h)]; {
		case dup && strings.HasPrefix(first, "session_headers"):
			return invalid(ErrHeaderConflict, "%s: %q is also %s: every session would be its own parent; "+
				"give the parent session a header of its own", key, h, first)
		case dup:
			return invalid(ErrHeaderName, "%s: %q: listed twice (also %s); header names are case-insensitive", key, h, first)
		}
		others[http.CanonicalHeaderKey(h)] = key
	}
	if h := c.Tenant.Header; h != "" {
		if err := check("tenant.header", h); err != nil {
			return err
		}
		if first, dup := others[http.CanonicalHeaderKey(h)]; dup {
			return invalid(ErrHeaderConflict, "tenant.header: %q is also %s: every session (or parent) would be a tenant "+
				"of its own; give the tenant its own header", h, first)
		}
	}
	if c.Tenant.APIKey {
		if _, dup := others["Authorization"]; !dup {
			others["Authorization"] = "tenant.api_key (Authorization: Bearer)"
		}
	}
	if h := c.Tenant.Header; h != "" {
		if _, dup := others[http.CanonicalHeaderKey(h)]; !dup {
			others[http.CanonicalHeaderKey(h)] = "tenant.header"
		}
	}
	if err := check("tier_header", c.TierHeader); err != nil {
		return err
	}
	if key, dup := others[http.CanonicalHeaderKey(c.TierHeader)]; dup {
		return invalid(ErrHeaderConflict, "tier_header: %q is also %s: its values would be taken for tier names "+
			"(every such request a 400 unknown_tier); give the tier its own header", c.TierHeader, key)
	}
	return nil
}

// unreadableHeaders are the request headers (canonical names) that cannot carry a
// session, parent session, tier or tenant, with the reason.
var unreadableHeaders = func() map[string]string {
	const hop = "a hop-by-hop header (RFC 9110 section 7.6.1): it describes the connection, not the request"
	m := map[string]string{
		"Host":              "net/http moves Host out of the header map (Request.Host), so it never matches",
		"Transfer-Encoding": "net/http moves Transfer-Encoding out of the header map (it frames the body), so it never matches",
		"Content-Length":    "it is the body's length, not an identifier",
	}
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"} {
		m[h] = hop
	}
	return m
}()

// headerNameProblem says why s (which validHeaderName rejected) is not a header name.
func headerNameProblem(s string) string {
	if s == "" {
		return "is empty; want an HTTP header name"
	}
	return "not a valid HTTP header name (RFC 9110 token: letters, digits and !#$%&'*+-.^_`|~; no spaces or colons)"
}

// validHeaderName reports whether s is a non-empty RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return http.CanonicalHeaderKey(s) != ""
}
