package gateway_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

const (
	keyA = "sk-tenant-a-0123456789abcdef"
	keyB = "sk-tenant-b-fedcba9876543210"
)

func bearer(k string) string { return "Bearer " + k }

// Tenant B sending tenant A's session ID does not land on A's binding.
func TestTenantScopesBindings(t *testing.T) {
	g, _ := testGateway(t, "tenant: {api_key: true}\n")
	hdr := func(key, session string) map[string]string {
		return map[string]string{"Authorization": bearer(key), "X-Session-ID": session}
	}
	rec := do(t, g, chat, chatBody, hdr(keyA, "shared-id"))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit))

	rec = do(t, g, chat, chatBody, hdr(keyB, "shared-id"))
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit), "B's first turn is not a hit on A's binding")
	assert.Equal(t, 2, g.Scheduler().Len(), "one binding per tenant")
	_, ok := g.Scheduler().Lookup("shared-id", "")
	assert.False(t, ok, "nothing is bound under the raw session ID")

	// A request without a tenant does not reach either tenant's binding either.
	rec = do(t, g, chat, chatBody, map[string]string{"X-Session-ID": "shared-id"})
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit))
	assert.Equal(t, 3, g.Scheduler().Len())

	for _, key := range []string{keyA, keyB} {
		rec = do(t, g, chat, chatBody, hdr(key, "shared-id"))
		assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit), "each tenant keeps its own binding")
	}
	// The bearer scheme is case-insensitive.
	rec = do(t, g, chat, chatBody, map[string]string{"Authorization": "bearer " + keyA, "X-Session-ID": "shared-id"})
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit))
}

// unkeyedTag is the tenant tag of an API key without a secret (unkeyed SHA-256), as
// anyone can compute it.
func unkeyedTag(key string) string {
	sum := sha256.Sum256([]byte("agentserve-tenant\x00binding\x00apikey\x00" + key))
	return "t:" + base64.RawURLEncoding.EncodeToString(sum[:16]) + ":"
}

// A request without a tenant identity cannot reach a tenant's binding by sending the
// tagged key itself (the tag is computable without a secret): it belongs to the
// anonymous tenant, whose keys carry a tag of their own. It is also held to
// max_session_id_bytes, not to the Scheduler's limit with room for the tag.
func TestTenantAnonymousRequestsAreScoped(t *testing.T) {
	t.Setenv(gateway.DefaultTenantSecretEnv, "") // unkeyed: the attacker's best case
	g, _ := testGateway(t, "tenant: {api_key: true}\n")
	rec := do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "a1"})
	require.Equal(t, http.StatusOK, rec.Code)
	_, ok := g.Scheduler().Lookup(unkeyedTag(keyA)+"a1", "")
	require.True(t, ok, "the test computes A's tag as the gateway does")

	forged := map[string]string{"X-Session-ID": unkeyedTag(keyA) + "a1"}
	for range 2 { // the second turn is the anonymous tenant's own hit
		rec = do(t, g, chat, chatBody, forged)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit))
	assert.Equal(t, 2, g.Scheduler().Len(), "the forged key got a binding of its own")
	rec = do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "a1"})
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit), "A's binding is intact")

	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"anonymous", map[string]string{}},
		{"tenant", map[string]string{"Authorization": bearer(keyA)}},
	} {
		for n, want := range map[int]int{affinity.DefaultMaxSessionIDBytes: http.StatusOK, affinity.DefaultMaxSessionIDBytes + 1: http.StatusBadRequest} {
			h := map[string]string{"X-Session-ID": strings.Repeat("s", n)}
			for k, v := range tc.headers {
				h[k] = v
			}
			rec = do(t, g, chat, chatBody, h)
			assert.Equal(t, want, rec.Code, "%s, a %d-byte session ID: %s", tc.name, n, rec.Body.String())
		}
	}
}

// A max_session_id_bytes near math.MaxInt with tenant scoping on is refused as a config
// error naming the key (it once overflowed the Scheduler's room for the tag into a
// negative limit and failed with "is negative"; since then it is above
// SessionIDBytesCap, the snapshot's cap: TestMaxSessionIDBytesHeldToTheSnapshotCap),
// and the largest accepted value works with tenant scoping on.
func TestTenantHugeSessionLimit(t *testing.T) {
	_, err := gateway.ParseConfig([]byte("backends: [{id: b0, url: \"http://127.0.0.1:9\"}]\n" +
		"affinity: {max_session_id_bytes: 9223372036854775800}\ntenant: {api_key: true}\n"))
	require.ErrorIs(t, err, gateway.ErrAffinityConfig)
	assert.ErrorContains(t, err, "affinity.max_session_id_bytes: 9223372036854775800: above")
	assert.NotContains(t, err.Error(), "negative")
	g, _ := testGateway(t, fmt.Sprintf("affinity: {max_session_id_bytes: %d}\ntenant: {api_key: true}\n", gateway.SessionIDBytesCap))
	rec := do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": strings.Repeat("s", gateway.SessionIDBytesCap)})
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// The parent hint is scoped too: B cannot start a subagent on A's session's backend.
func TestTenantScopesParent(t *testing.T) {
	g, _ := testGateway(t, "tenant: {api_key: true}\n")
	rec := do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "main"})
	require.Equal(t, http.StatusOK, rec.Code)
	do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyB), "X-Session-ID": "sub", "X-Parent-Session-ID": "main"})
	assert.Zero(t, g.Scheduler().Stats().ParentPlaced)
	do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "sub", "X-Parent-Session-ID": "main"})
	assert.Equal(t, uint64(1), g.Scheduler().Stats().ParentPlaced, "same tenant: placed on the parent's backend")
}

// A configured tenant header wins over the API key.
func TestTenantHeaderWinsOverAPIKey(t *testing.T) {
	g, _ := testGateway(t, "tenant: {api_key: true, header: X-Tenant-ID}\n")
	do(t, g, chat, chatBody, map[string]string{"X-Tenant-ID": "acme", "Authorization": bearer(keyA), "X-Session-ID": "s"})
	rec := do(t, g, chat, chatBody, map[string]string{"X-Tenant-ID": "acme", "Authorization": bearer(keyB), "X-Session-ID": "s"})
	assert.Equal(t, "true", rec.Header().Get(gateway.HeaderAffinityHit), "same tenant header, other key: same binding")
	rec = do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "s"})
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit), "the API key alone is another tenant than the header")
}

func cacheSalt(t *testing.T, body string) (string, bool) {
	t.Helper()
	var v map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	raw, ok := v[gateway.CacheSaltField]
	if !ok {
		return "", false
	}
	var s string
	require.NoError(t, json.Unmarshal(raw, &s))
	return s, true
}

func TestCacheSaltInjection(t *testing.T) {
	g, backends := testGateway(t, "tenant: {api_key: true, cache_salt: true}\n")
	send := func(path, body string, headers map[string]string) string {
		t.Helper()
		rec := do(t, g, path, body, headers)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		got, auth := backends.last()
		if h, ok := headers["Authorization"]; ok {
			assert.Equal(t, h, auth, "the API key still reaches the backend")
		}
		return got
	}
	a := map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "s"}
	b := map[string]string{"Authorization": bearer(keyB), "X-Session-ID": "s"}

	saltA, ok := cacheSalt(t, send(chat, chatBody, a))
	require.True(t, ok, "chat completions are salted")
	assert.Len(t, saltA, 22)
	body := send(chat, `{"model":"m","cache_salt":"attacker-chosen","messages":[],"cache_salt":"again","n":1.50}`, a)
	got, _ := cacheSalt(t, body)
	assert.Equal(t, saltA, got, "a client-sent salt is replaced; the same tenant gets the same salt")
	assert.NotContains(t, body, "attacker-chosen")
	assert.Contains(t, body, `"n":1.50`, "other values pass byte for byte")
	got, _ = cacheSalt(t, send(chat+"/", chatBody, a))
	assert.Equal(t, saltA, got, "a trailing slash is the same endpoint: salted alike")
	plain := map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "s", "Content-Type": "text/plain"}
	got, _ = cacheSalt(t, send(chat+"/", `{"model":"m","cache_salt":"mine","messages":[]}`, plain))
	assert.Equal(t, saltA, got, "also with a non-JSON Content-Type, as without the slash")
	saltB, _ := cacheSalt(t, send("/v1/completions", `{"model":"m","prompt":"x"}`, b))
	assert.NotEqual(t, saltA, saltB, "tenants get different salts")
	for _, salt := range []string{saltA, saltB} {
		assert.NotContains(t, keyA+keyB, salt)
	}

	_, ok = cacheSalt(t, send("/v1/embeddings", `{"model":"m","input":"x"}`, a))
	assert.False(t, ok, "only the completions endpoints take cache_salt")
	// A request without a tenant identity gets the anonymous tenant's salt, also in
	// place of one it sent (a client must not pick another tenant's salt).
	saltAnon, ok := cacheSalt(t, send(chat, chatBody, map[string]string{"X-Session-ID": "s"}))
	require.True(t, ok, "a request without a tenant is salted as the anonymous tenant")
	assert.NotContains(t, []string{saltA, saltB}, saltAnon)
	got, _ = cacheSalt(t, send(chat, `{"model":"m","cache_salt":"`+saltA+`","messages":[]}`, map[string]string{"X-Session-ID": "s"}))
	assert.Equal(t, saltAnon, got, "a client-sent salt is replaced on anonymous requests too")

	rec := do(t, g, chat, `{"model":`, a)
	assert.Equal(t, http.StatusBadRequest, rec.Code, "malformed JSON is rejected, not forwarded unsalted")

	// A multipart body is not read as JSON, so it is not salted either, whatever its
	// first byte (it used to be taken for a JSON object when it began with '{': 400).
	multipart := map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "s", "Content-Type": "multipart/form-data; boundary=x"}
	assert.Equal(t, `{not json`, send(chat, `{not json`, multipart), "forwarded untouched")
}

// With a secret the hashes are keyed: a different secret gives different salts.
func TestTenantSecret(t *testing.T) {
	salt := func(secret string) string {
		t.Setenv(gateway.DefaultTenantSecretEnv, secret)
		g, backends := testGateway(t, "tenant: {api_key: true, cache_salt: true}\n")
		do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA)})
		body, _ := backends.last()
		s, ok := cacheSalt(t, body)
		require.True(t, ok)
		return s
	}
	unkeyed, s1, s2 := salt(""), salt("secret-one"), salt("secret-two")
	assert.NotEqual(t, unkeyed, s1)
	assert.NotEqual(t, s1, s2)
	assert.Equal(t, s1, salt("secret-one"), "deterministic: replicas with one secret agree")
}

func TestTenantConfigErrors(t *testing.T) {
	_, err := gateway.ParseConfig([]byte(minimal + "tenant: {cache_salt: true}\n"))
	assert.ErrorIs(t, err, gateway.ErrTenantConfig)
	_, err = gateway.ParseConfig([]byte(minimal + "tenant: {header: \"bad header\"}\n"))
	assert.ErrorIs(t, err, gateway.ErrHeaderName)
	cfg, err := gateway.ParseConfig([]byte(minimal + "tenant: {api_key: true}\n"))
	require.NoError(t, err)
	assert.Equal(t, gateway.DefaultTenantSecretEnv, cfg.Tenant.SecretEnv)
}

// The raw API key and tenant header never appear in logs, metrics, bindings or
// responses, including error paths (too-long session ID, backend down).
func TestTenantIdentityNeverExposed(t *testing.T) {
	const tenantHeader = "tenant-header-value-42"
	logger, logs := captureLogs()
	g, _ := testGateway(t, "tenant: {api_key: true, header: X-Tenant-ID, cache_salt: true}\n", gateway.WithLogger(logger))
	var responses strings.Builder
	record := func(rec *httptest.ResponseRecorder) {
		responses.WriteString(rec.Body.String())
		for k, v := range rec.Header() {
			responses.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
	}
	for _, h := range []map[string]string{
		{"Authorization": bearer(keyA), "X-Session-ID": "s1"},
		{"Authorization": bearer(keyA), "X-Session-ID": "s1"},
		{"X-Tenant-ID": tenantHeader, "X-Session-ID": "s2", "X-Parent-Session-ID": "s1"},
		{"Authorization": bearer(keyA), "X-Session-ID": strings.Repeat("x", 400)}, // 400: too long
	} {
		record(do(t, g, chat, chatBody, h))
	}
	// The client's session ID is checked against the documented limit (256) before the
	// tenant tag is added: 232 and 256 bytes fit, 257 is a 400 naming the client's own
	// length (before, 232 bytes gave a 400 showing "257 bytes" and the tag).
	for _, n := range []int{232, 256} {
		fits := do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": strings.Repeat("z", n)})
		record(fits)
		assert.Equal(t, http.StatusOK, fits.Code, "%d bytes fit with the tenant tag: %s", n, fits.Body.String())
	}
	over := do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": strings.Repeat("z", 257)})
	record(over)
	assert.Equal(t, http.StatusBadRequest, over.Code)
	assert.Equal(t, "session_id_too_long", errorCodeOf(t, over.Body.String()), "the error's shape, no package prefix (tester31)")
	assert.Contains(t, over.Body.String(), "257 bytes (max 256)", "the client's own length")
	// Break every binding: broken bindings are logged (at Debug) on their next turn.
	for _, id := range []string{"b0", "b1", "b2"} {
		g.Scheduler().OnBackendDown(id)
	}
	record(do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "s1"}))
	m := httptest.NewRecorder()
	g.ServeHTTP(m, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	metricsBody, _ := io.ReadAll(m.Body)

	require.NotEmpty(t, logs.String(), "the check below must look at real log output")
	for name, text := range map[string]string{"logs": logs.String(), "metrics": string(metricsBody), "responses": responses.String()} {
		for _, secret := range []string{keyA, keyA[:12], tenantHeader} {
			assert.NotContains(t, text, secret, "%s expose the tenant identity", name)
		}
	}
	// Nor does a response show a tenant tag ("t:<22 base64url>:"), error bodies included.
	assert.NotRegexp(t, `t:[A-Za-z0-9_-]{22}:`, responses.String(), "responses expose a tenant tag")
}

// Turning tenant scoping on by a reload gives the Scheduler room for the tag too: a
// session ID of the documented maximum still fits; off again, 257 bytes are refused.
func TestReloadTenantKeepsSessionLimit(t *testing.T) {
	g, _ := testGateway(t, "")
	max := strings.Repeat("m", 256)
	cfg := g.Config()
	cfg.Tenant = gateway.TenantConfig{APIKey: true}
	require.NoError(t, g.Reload(cfg))
	rec := do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": max})
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": max + "x"})
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	cfg.Tenant = gateway.TenantConfig{}
	require.NoError(t, g.Reload(cfg))
	rec = do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": max + "x"})
	assert.Equal(t, http.StatusBadRequest, rec.Code, "without tenant scoping the Scheduler checks the client's ID")
	rec = do(t, g, chat, chatBody, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": max})
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// With tenant.cache_salt a request holds its body and the salted copy, so
// limits.max_inflight_bytes must hold both for a body of max_body_bytes: a smaller budget
// is refused at load (a request that never fits would otherwise get 503 with
// Retry-After for ever); at the bound, a salted body of nearly max_body_bytes is served
// and its charges are released. (e2e's TestCacheSaltCopyChargedToBudget shows the copy
// refused when other requests hold the budget.)
func TestCacheSaltNeedsRoomForTheCopy(t *testing.T) {
	const maxBody = 1 << 20
	cfg := func(budget int64) string {
		return fmt.Sprintf("max_body_bytes: %d\nlimits: {max_inflight_bytes: %d}\ntenant: {api_key: true, cache_salt: true}\n", maxBody, budget)
	}
	for _, budget := range []int64{maxBody, 2*maxBody + 63} {
		_, err := gateway.ParseConfig([]byte(cfg(budget) + "backends: [{id: b0, url: 'http://127.0.0.1:9'}]\n"))
		require.ErrorIs(t, err, gateway.ErrLimitsConfig, "budget %d", budget)
		assert.ErrorContains(t, err, "tenant.cache_salt")
	}
	g, seen := testGateway(t, cfg(2*maxBody+64))
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", maxBody-100) + `"}]}`
	rec := do(t, g, chat, body, map[string]string{"Authorization": bearer(keyA), "X-Session-ID": "s"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	got, _ := seen.last()
	_, ok := cacheSalt(t, got)
	assert.True(t, ok, "salted")
	reqs, bytes := g.InFlight()
	assert.Zero(t, reqs+bytes, "the charges are released with the request")
}
