package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"math"
	"net/http"
	"os"
	"strings"

	"github.com/agentserve/sessionaffinity/affinity"
)

// DefaultTenantSecretEnv is the environment variable holding the per-deployment secret
// that keys the tenant hashes when `tenant.secret_env` is omitted.
const DefaultTenantSecretEnv = "AGENTSERVE_TENANT_SECRET"

// CacheSaltField is the top-level request-body field vLLM reads as the per-request
// prefix-cache salt (requests with different salts never share cached blocks).
const CacheSaltField = "cache_salt"

// TenantConfig scopes bindings by tenant. With a tenant source configured, a request
// that carries a tenant identity has its session ID (and parent session ID) prefixed by
// a keyed hash of that identity before it reaches the Scheduler, so two tenants sending
// the same session ID get separate bindings. The raw identity (API key or header value)
// is never stored, logged or exported; only the hash lives in the binding table (and in
// the binding_snapshot file, mode 0600, which holds each key "t:<tag>:<session ID>" with
// the session ID as sent).
//
// Decision: with a tenant source configured, a request that carries no tenant identity
// (no tenant header, no API key) belongs to one anonymous tenant with a tag and salt of
// its own. Unscoped, its session ID would share the key space of the tagged keys: a
// client could send "t:<tag>:<session>" itself (the tag is computable without a
// secret) and hit or refresh a tenant's binding, and it would be held to
// max_session_id_bytes + [TenantTagBytes] instead of max_session_id_bytes.
//
// A [Gateway.Reload] that turns scoping on or off or changes header, api_key or the
// secret changes every binding key: each session is placed again on its next turn (one
// Warn at the reload says so); cache_salt alone keeps the keys, but a reload that
// changes the salt (cache_salt on or off, or with it on any of the above) logs a Warn
// that the prefix caches of salted requests go cold.
type TenantConfig struct {
	// Header names a request header carrying the tenant ID (e.g. X-Tenant-ID set by an
	// authenticating proxy in front of the gateway). When present and non-empty it wins
	// over the API key. "" means none.
	Header string `yaml:"header"`
	// APIKey uses the bearer token of `Authorization: Bearer <key>` as the tenant
	// identity when the tenant header is absent.
	APIKey bool `yaml:"api_key"`
	// SecretEnv names the environment variable holding the HMAC-SHA256 key (any bytes;
	// use 32 random ones: a shorter one, [MinTenantSecretBytes], is logged as a warning
	// at startup). Default AGENTSERVE_TENANT_SECRET when a source is configured. A
	// gateway restarted with another secret finds none of its saved or shared tenant
	// bindings, and cannot tell (it keeps no trace of the secret): each tenant session is
	// placed again on its next turn.
	// A name that is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, e.g.
	// "A B") is [ErrTenantConfig]: no variable could be set under it, so the hashes
	// would be unkeyed for ever.
	// If the variable is unset or empty the hashes fall back to unkeyed SHA-256 and the
	// gateway logs a warning at startup: still never raw, but a guessable tenant ID
	// (a short header value) can then be confirmed from its hash. Every gateway replica
	// must use the same secret, or they place sessions differently.
	SecretEnv string `yaml:"secret_env"`
	// CacheSalt sets vLLM's per-request "cache_salt" in the JSON body of POST
	// .../chat/completions and .../completions to a value derived from the tenant
	// (replacing any salt the client sent), so prefix caches are not shared across
	// tenants. Requires a tenant source. Requests without a tenant identity get the
	// salt of the anonymous tenant (see [TenantConfig]), so a client cannot pick
	// another tenant's salt either.
	CacheSalt bool `yaml:"cache_salt"`
}

// enabled reports whether a tenant source is configured.
func (c TenantConfig) enabled() bool { return c.APIKey || c.Header != "" }

// MinTenantSecretBytes is the shortest tenant secret [New] accepts without a warning: the
// output length of SHA-256, under which RFC 2104 (section 3) discourages HMAC keys.
const MinTenantSecretBytes = 32

// tenants derives the tenant tags of requests. Safe for concurrent use (immutable).
type tenants struct {
	cfg    TenantConfig
	secret []byte // nil: unkeyed SHA-256
}

// newTenants reads the secret from the environment; nil when tenant scoping is off.
func newTenants(cfg TenantConfig) *tenants {
	if !cfg.enabled() {
		return nil
	}
	t := &tenants{cfg: cfg}
	if v := os.Getenv(cfg.SecretEnv); v != "" {
		t.secret = []byte(v)
	}
	return t
}

// anonymousTenant is the identity of requests that carry none: no header value or API
// key identity equals it (they are prefixed "header\x00" and "apikey\x00").
const anonymousTenant = "anonymous\x00"

// identity returns the tenant identity of r (source-prefixed, so a header value and an
// API key never collide) or anonymousTenant when r carries none.
func (t *tenants) identity(r *http.Request) string {
	if t.cfg.Header != "" {
		if v := strings.TrimSpace(r.Header.Get(t.cfg.Header)); v != "" {
			return "header\x00" + v
		}
	}
	if t.cfg.APIKey {
		if key := bearer(r.Header.Get("Authorization")); key != "" {
			return "apikey\x00" + key
		}
	}
	return anonymousTenant
}

// rekeys reports whether a request's binding key under a can differ from its key under
// b (nil: tenant scoping off): scoping turned on or off, another tenant header or
// api_key setting (which identity a request has), or another secret (its tag). cache_salt
// alone re-keys nothing. Reload warns when it does: every session is placed again.
func (a *tenants) rekeys(b *tenants) bool {
	if a == nil || b == nil {
		return a != b
	}
	return http.CanonicalHeaderKey(a.cfg.Header) != http.CanonicalHeaderKey(b.cfg.Header) ||
		a.cfg.APIKey != b.cfg.APIKey || !bytes.Equal(a.secret, b.secret)
}

// describe is t's identity source for a log line: "off", or the header, api_key and
// whether the tags are keyed (never the secret).
func (t *tenants) describe() string {
	if t == nil {
		return "off"
	}
	keyed := "unkeyed"
	if t.secret != nil {
		keyed = "keyed by " + t.cfg.SecretEnv
	}
	return fmt.Sprintf("header=%q api_key=%t %s", t.cfg.Header, t.cfg.APIKey, keyed)
}

// bearer returns the token of an "Authorization: Bearer <token>" value ("" otherwise).
// The scheme is case-insensitive (RFC 9110 section 11.1).
func bearer(v string) string {
	const prefix = "bearer "
	if len(v) <= len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(v[len(prefix):])
}

// derive returns base64url(first 16 bytes of HMAC-SHA256(secret, purpose 0x00 id)), or
// of SHA-256 over the same input without a secret: 22 characters, 128 bits.
func (t *tenants) derive(purpose, id string) string {
	var h hash.Hash
	if t.secret != nil {
		h = hmac.New(sha256.New, t.secret)
	} else {
		h = sha256.New()
	}
	h.Write([]byte("agentserve-tenant\x00" + purpose + "\x00"))
	h.Write([]byte(id))
	sum := h.Sum(nil)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// tag returns the binding-scope tag of identity id: the prefix added to session IDs.
func (t *tenants) tag(id string) string { return "t:" + t.derive("binding", id) + ":" }

// scope returns session prefixed with the tenant tag of id ("" stays "").
func (t *tenants) scope(id, session string) string {
	if session == "" {
		return ""
	}
	return t.tag(id) + session
}

// tenantOf returns the request's tenant identity: "" when tenant scoping is off, the
// anonymous tenant's when the request carries none. It holds the raw API key or header
// value: never log it.
func (rt *routing) tenantOf(r *http.Request) string {
	if rt.tenants == nil {
		return ""
	}
	return rt.tenants.identity(r)
}

// saltBody returns body with vLLM's cache_salt derived from tenant when tenant.cache_salt
// is on and r is a POST with a JSON object body to a completions endpoint; otherwise body
// unchanged. The salted copy is charged to charge before it is allocated (nil: not
// charged); a refusal is errOverBudget.
func (rt *routing) saltBody(r *http.Request, body []byte, tenant string, charge func(n int64) bool) ([]byte, error) {
	if !rt.cfg.Tenant.CacheSalt || r.Method != http.MethodPost || !isSaltEndpoint(r.URL.Path) {
		return body, nil
	}
	if !jsonBody(r, body) {
		return body, nil // not read as JSON (multipart, say): parseModel let it through
	}
	out, err := withCacheSalt(body, rt.tenants.salt(tenant), charge)
	switch {
	case errors.Is(err, errOverBudget):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("malformed JSON request body: %v", err)
	}
	return out, nil
}

// salt returns the cache_salt of identity id (independent of the tag).
func (t *tenants) salt(id string) string { return t.derive("cache_salt", id) }

// TenantTagBytes is the number of bytes a tenant scope adds in front of a session ID.
// Decision: it does not count towards affinity.max_session_id_bytes, which bounds the
// session ID the client sent (checked before scoping, [routing.scopeSession]); with
// tenant scoping on, the Scheduler's own limit is max_session_id_bytes + TenantTagBytes
// ([schedulerConfig]).
const TenantTagBytes = 2 + 22 + 1

// schedulerConfig is the affinity.Config the Scheduler of cfg is built with: cfg.Affinity,
// with room for the tenant tag in max_session_id_bytes when tenant scoping is on (at most
// math.MaxInt: a limit within TenantTagBytes of it is no limit anyway).
func schedulerConfig(cfg Config) affinity.Config {
	ac := cfg.Affinity
	if cfg.Tenant.enabled() {
		ac.MaxSessionIDBytes = min(cfg.maxSessionIDBytes(), math.MaxInt-TenantTagBytes) + TenantTagBytes
	}
	return ac
}

// maxSessionIDBytes is affinity.max_session_id_bytes with its default applied: the
// longest session ID a client may send.
func (c Config) maxSessionIDBytes() int {
	if c.Affinity.MaxSessionIDBytes == 0 {
		return affinity.DefaultMaxSessionIDBytes
	}
	return c.Affinity.MaxSessionIDBytes
}

// scopeSession prefixes the client's session and parent session IDs with the tenant tag
// of tenant. The client's session ID is checked against max_session_id_bytes first, so
// the error (affinity.ErrSessionIDTooLong, the client's own length and ID) never shows
// the tag; a parent ID over the limit is dropped, as the Scheduler ignores one.
func (rt *routing) scopeSession(tenant, session, parent string) (string, string, error) {
	max := rt.cfg.maxSessionIDBytes()
	if err := checkSessionID(session, max); err != nil {
		return "", "", err
	}
	if len(parent) > max {
		parent = ""
	}
	return rt.tenants.scope(tenant, session), rt.tenants.scope(tenant, parent), nil
}

// isSaltEndpoint reports whether vLLM accepts cache_salt on this path. A trailing slash
// is ignored, as generationCall ignores it: a tenant must not get unsalted (shared) prefix
// caching by spelling the path /v1/chat/completions/.
func isSaltEndpoint(path string) bool {
	path = strings.TrimSuffix(path, "/")
	return strings.HasSuffix(path, "/chat/completions") || strings.HasSuffix(path, "/completions")
}

// withCacheSalt returns body with the top-level "cache_salt" set to salt: every
// top-level member whose key, unescaped, is "cache_salt" (duplicates included) is cut out
// with its separating comma, and `"cache_salt":<salt as a JSON string>` is inserted first
// after the '{'. Every other byte is copied untouched (keys with invalid UTF-8 or lone
// surrogate escapes, number spellings, whitespace); nested "cache_salt" keys are not
// members of the top level and stay. The result is one allocation of exactly its length
// (saltedLen), made only after charge (nil: not charged) accepted it; charge refusing is
// errOverBudget. body must be valid JSON whose top-level value is an object, else an
// error. Cost: two passes over body (validation and the member walk; strings skipped
// eight bytes at a time) and one copy.
func withCacheSalt(body []byte, salt string, charge func(n int64) bool) ([]byte, error) {
	top, obj, _ := scanJSON(body)
	if !obj {
		return nil, errors.New("not a JSON object")
	}
	var small [4]span
	cuts, kept := saltCuts(body, top.open, small[:0])
	head := appendJSONString(append(make([]byte, 0, 48), `"`+CacheSaltField+`":`...), salt)
	if kept {
		head = append(head, ',') // other members follow
	}
	n := len(body) + len(head)
	for _, c := range cuts {
		n -= c.end - c.start
	}
	if charge != nil && !charge(int64(n)) {
		return nil, errOverBudget
	}
	out := make([]byte, 0, n)
	out = append(append(out, body[:top.open+1]...), head...)
	at := top.open + 1
	for _, c := range cuts {
		out = append(out, body[at:c.start]...)
		at = c.end
	}
	return append(out, body[at:]...), nil
}

// span is the byte range [start, end) of a body.
type span struct{ start, end int }

// saltCuts returns the byte ranges to cut from the valid JSON object at body[open] ==
// '{' so that no top-level "cache_salt" member is left and the rest stays a valid member
// list, in increasing order, appended to cuts; kept reports whether any other member
// remains. A cut member that another member follows is cut up to that member's key
// (its value, whitespace and comma); the run of cut members after the last kept one is
// cut from the end of the kept member's value (the comma before them) — or, when no
// member is kept, from the first member's key — to the end of the last value.
func saltCuts(body []byte, open int, cuts []span) (_ []span, kept bool) {
	lastKeptEnd, firstKey := -1, -1
	prevCut := false // the previous member is cut, its span not yet closed
	i := skipWS(body, open+1)
	for i < len(body) && body[i] == '"' {
		keyStart := i
		if firstKey < 0 {
			firstKey = i
		}
		if prevCut {
			cuts[len(cuts)-1].end = keyStart
			prevCut = false
		}
		end, _ := scanString(body, i)
		raw := body[i+1 : end-1]
		i = skipWS(body, end)
		i = skipWS(body, i+1) // past ':'
		vend := skipJSONValue(body, i)
		if keyIs(raw, CacheSaltField) {
			cuts = append(cuts, span{keyStart, vend})
			prevCut = true
		} else {
			lastKeptEnd = vend
		}
		i = skipWS(body, vend)
		if i < len(body) && body[i] == ',' {
			i = skipWS(body, i+1)
		}
	}
	if !prevCut {
		return cuts, lastKeptEnd >= 0
	}
	// The last member is cut: merge the trailing run of cut members into one cut that
	// also takes the comma before it.
	from := firstKey
	if lastKeptEnd >= 0 {
		from = lastKeptEnd
	}
	end := cuts[len(cuts)-1].end
	for len(cuts) > 0 && cuts[len(cuts)-1].start >= from {
		cuts = cuts[:len(cuts)-1]
	}
	return append(cuts, span{from, end}), lastKeptEnd >= 0
}

// skipJSONValue returns the index just past the JSON value starting at b[i]; b must be
// valid JSON. Like skipValue, with strings skipped eight bytes at a time (scanString).
func skipJSONValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i, _ = scanString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	return skipValue(b, i)
}
