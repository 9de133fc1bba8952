package gateway_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// errorCodeOf returns the "code" of the gateway's JSON error body, after checking its
// shape: OpenAI's {"error":{"message","type","code"}} with Anthropic's top-level
// "type":"error" (both SDKs read it as an error of their own API).
func errorCodeOf(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	require.Equal(t, "error", e.Type, "top-level type: %s", body)
	require.NotEmpty(t, e.Error.Message, body)
	for _, prefix := range []string{"affinity:", "gateway:"} { // Go package prefixes: not the client's business
		require.NotContains(t, e.Error.Message, prefix, body)
	}
	require.Contains(t, []string{"invalid_request_error", "server_error"}, e.Error.Type, body)
	return e.Error.Code
}

// The gateway's own JSON errors written before a backend is chosen carry no
// X-Agent-Serve-* headers; see docs/gateway.md.
func TestGatewayErrorsBeforeChoiceCarryNoRoutingHeaders(t *testing.T) {
	sid := map[string]string{"X-Session-ID": "s1"}
	tests := []struct {
		name    string
		extra   string
		body    string
		headers map[string]string
		status  int
		code    string
	}{
		{"invalid json", "", `{`, sid, http.StatusBadRequest, "invalid_json"},
		{"unknown tier", "", `{}`, map[string]string{"X-Session-ID": "s1", "X-Agent-Serve-Tier": "nope"}, http.StatusBadRequest, "unknown_tier"},
		{"missing session", "require_session: true\n", `{}`, nil, http.StatusBadRequest, "missing_session_id"},
		{"too large", "max_body_bytes: 16\n", `{"model":"m","messages":[]}`, sid, http.StatusRequestEntityTooLarge, "request_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, tt.extra)
			rec := do(t, g, "/v1/chat/completions", tt.body, tt.headers)
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			assert.Equal(t, tt.code, errorCodeOf(t, rec.Body.String()))
			assert.Empty(t, rec.Header().Get(gateway.HeaderBackend))
			assert.Empty(t, rec.Header().Get(gateway.HeaderAffinityHit))
		})
	}
}

// A 502 backend_unavailable (like a 504 backend_timeout) is written after a backend was
// chosen: it names that backend in X-Agent-Serve-Backend and X-Agent-Serve-Affinity-Hit.
func TestGatewayErrorAfterChoiceNamesTheBackend(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	cfg, err := gateway.ParseConfig([]byte("retry_on_connect_error: false\nhealth: {enabled: false}\nbackends:\n  - {id: dead, url: \"" + url + "\"}\n"))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	rec := do(t, g, "/v1/chat/completions", `{"model":"m"}`, map[string]string{"X-Session-ID": "s1"})
	require.Equal(t, http.StatusBadGateway, rec.Code, rec.Body.String())
	assert.Equal(t, "backend_unavailable", errorCodeOf(t, rec.Body.String()))
	assert.Equal(t, "dead", rec.Header().Get(gateway.HeaderBackend))
	assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit))
	assert.True(t, strings.Contains(rec.Body.String(), `backend \"dead\"`), rec.Body.String())
	assert.NotContains(t, rec.Body.String(), strings.TrimPrefix(url, "http://"), "the backend's address is not shown")
}

// The gateway's 502 and 504 name the backend by its ID and a short reason, never its
// address nor the Go error ("dial tcp 127.0.0.1:36132: connect: connection refused"),
// which stays in the Warn line. Both backend clients. (Before: the body carried the Go
// error, address included.)
func TestBackendErrorShowsNoAddress(t *testing.T) {
	stalled := requestServer(t, func(c net.Conn, _ *http.Request) { _, _ = io.Copy(io.Discard, c) })
	dead := httptest.NewServer(http.NotFoundHandler())
	refused := dead.URL
	tests := []struct {
		name   string
		url    string
		status int
		reason string
	}{
		{"refused", refused, http.StatusBadGateway, "connection refused"},
		{"reset", rawServer(t, func(c net.Conn) { _ = c.(*net.TCPConn).SetLinger(0) }), http.StatusBadGateway, "connection reset"},
		{"closed without an answer", requestServer(t, func(net.Conn, *http.Request) {}), http.StatusBadGateway, "connection closed"},
		{"malformed", requestServer(t, func(c net.Conn, _ *http.Request) { _, _ = io.WriteString(c, "garbage\r\n\r\n") }),
			http.StatusBadGateway, "malformed response"},
		{"timed out", stalled, http.StatusGatewayTimeout, "timed out: sent no response headers within 50ms"},
	}
	// Closed only once the table's servers are bound: closed first, its port was once given
	// to the "malformed" server, which then answered the "refused" case.
	dead.Close()
	for _, client := range []string{"direct", "nethttp"} {
		for _, tt := range tests {
			t.Run(client+"/"+tt.name, func(t *testing.T) {
				logs, buf := captureLogs()
				cfg, err := gateway.ParseConfig([]byte("retry_on_connect_error: false\nhealth: {enabled: false}\nbackend_client: " + client +
					"\ntimeouts: {response_header_seconds: 0.05}\nbackends:\n  - {id: b0, url: \"" + tt.url + "\"}\n"))
				require.NoError(t, err)
				g, err := gateway.New(cfg, gateway.WithLogger(logs))
				require.NoError(t, err)
				t.Cleanup(g.Close)
				rec := do(t, g, "/v1/chat/completions", `{"model":"m"}`, map[string]string{"X-Session-ID": "s1"})
				require.Equal(t, tt.status, rec.Code, rec.Body.String())
				var e struct {
					Error struct{ Message string } `json:"error"`
				}
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
				assert.Equal(t, `backend "b0": `+tt.reason, e.Error.Message)
				assert.NotContains(t, rec.Body.String(), "127.0.0.1", "no address in the body")
				assert.Contains(t, buf.String(), `"msg":"backend request failed","backend":"b0","err":`, "the whole error is logged")
			})
		}
	}
}

// Every Content-Encoding value counts: header lines after the first and elements of a
// comma-separated list (RFC 9110 §8.4). A gzipped body announced as "identity" then
// "gzip" is a 415, not an invalid_json 400.
func TestContentEncodingEveryValue(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"model":"m","messages":[]}`))
	require.NoError(t, zw.Close())
	tests := []struct {
		name   string
		lines  []string
		status int
		coding string
	}{
		{"identity then gzip lines", []string{"identity", "gzip"}, http.StatusUnsupportedMediaType, "gzip"},
		{"gzip then identity lines", []string{"gzip", "identity"}, http.StatusUnsupportedMediaType, "gzip"},
		{"list", []string{"identity, br"}, http.StatusUnsupportedMediaType, "br"},
		{"list, empty elements", []string{" , identity,,gzip "}, http.StatusUnsupportedMediaType, "gzip"},
		{"identity twice", []string{"identity", "Identity, identity"}, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, "")
			body := gz.Bytes()
			if tt.status == http.StatusOK {
				body = []byte(`{"model":"m","messages":[]}`)
			}
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-ID", "s1")
			for _, l := range tt.lines {
				req.Header.Add("Content-Encoding", l)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			if tt.status == http.StatusOK {
				return
			}
			assert.Equal(t, "unsupported_content_encoding", errorCodeOf(t, rec.Body.String()))
			assert.Contains(t, rec.Body.String(), `Content-Encoding \"`+tt.coding+`\"`)
			assert.Equal(t, "identity", rec.Header().Get("Accept-Encoding"))
		})
	}
}

// A JSON body sent with a Content-Encoding other than identity is not parsed as raw
// JSON (that gave a misleading 400 invalid_json): it gets a 415 naming the encoding.
func TestCompressedJSONBodyIs415(t *testing.T) {
	tests := []struct {
		name, encoding, contentType, path string
		status                            int
		code                              string
	}{
		{"gzip", "gzip", "application/json", "/v1/chat/completions", http.StatusUnsupportedMediaType, "unsupported_content_encoding"},
		{"br, no content type", "br", "", "/v1/chat/completions", http.StatusUnsupportedMediaType, "unsupported_content_encoding"},
		{"zstd on a +json type", "zstd", "application/vnd.x+json", "/v1/other", http.StatusUnsupportedMediaType, "unsupported_content_encoding"},
		{"identity is plain", "identity", "application/json", "/v1/chat/completions", http.StatusOK, ""},
		{"IDENTITY any case", " IDENTITY ", "application/json", "/v1/chat/completions", http.StatusOK, ""},
		{"not inspected: passed through", "gzip", "application/octet-stream", "/v1/files", http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, "")
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(`{"model":"m","messages":[]}`))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			req.Header.Set("Content-Encoding", tt.encoding)
			req.Header.Set("X-Session-ID", "s1")
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			if tt.code == "" {
				assert.NotEmpty(t, rec.Header().Get(gateway.HeaderBackend))
				return
			}
			assert.Equal(t, tt.code, errorCodeOf(t, rec.Body.String()))
			assert.Contains(t, rec.Body.String(), `Content-Encoding \"`+tt.encoding+`\"`)
			assert.Equal(t, "identity", rec.Header().Get("Accept-Encoding"))
			assert.Empty(t, rec.Header().Get(gateway.HeaderBackend))

			d, err := g.Decide(req, []byte(`{"model":"m"}`), nil)
			var re *gateway.RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, http.StatusUnsupportedMediaType, re.Status)
			assert.Equal(t, tt.code, re.Code)
			assert.Nil(t, d.Done)
		})
	}
}

// When each tier error happens (docs/gateway.md, doc.go): unknown_tier when the tier header names
// a tier the config does not know, whatever its length. A configured tier name over
// affinity.MaxTierBytes (255) is refused at load (TestParseConfigErrors), so
// tier_too_long cannot come from a valid gateway config: a 255-byte tier routes and binds.
func TestTierErrorCodes(t *testing.T) {
	longest := strings.Repeat("t", affinity.MaxTierBytes)
	g, _ := testGateway(t, "model_tiers: {m: "+longest+"}\n")
	for _, tt := range []struct {
		name, body string
		headers    map[string]string
		status     int
		code       string
	}{
		{"over-long unconfigured header value", `{"model":"x"}`, map[string]string{"X-Session-ID": "s", "X-Agent-Serve-Tier": strings.Repeat("u", 300)}, http.StatusBadRequest, "unknown_tier"},
		{"unconfigured header value one past the longest", `{"model":"x"}`, map[string]string{"X-Session-ID": "s", "X-Agent-Serve-Tier": longest + "t"}, http.StatusBadRequest, "unknown_tier"},
		{"longest configured tier by model", `{"model":"m"}`, map[string]string{"X-Session-ID": "s"}, http.StatusOK, ""},
		{"longest configured tier by header", `{"model":"x"}`, map[string]string{"X-Session-ID": "s", "X-Agent-Serve-Tier": longest}, http.StatusOK, ""},
		{"longest configured tier, no session", `{"model":"m"}`, nil, http.StatusOK, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, g, "/v1/chat/completions", tt.body, tt.headers)
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			if tt.code != "" {
				assert.Equal(t, tt.code, errorCodeOf(t, rec.Body.String()))
			}
		})
	}
}

// The 400 unknown_tier message quotes the tier header's value, except when the tier
// header is Authorization or the tenant header: a credential or a tenant identity is
// never echoed in an error body. (tier_header Authorization with tenant.api_key, or the
// tenant header itself, is refused at load: TestParseConfigErrors.)
func TestUnknownTierNeverEchoesCredentials(t *testing.T) {
	const secret = "sk-secret-0123456789"
	for _, tt := range []struct {
		name, extra, header string
		echoed              bool
	}{
		{"tier header", "", "X-Agent-Serve-Tier", true},
		{"Authorization, no tenant", "tier_header: Authorization\n", "Authorization", false},
		{"authorization (any case), tenant header elsewhere", "tier_header: authorization\ntenant: {header: X-Tenant}\n", "Authorization", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, tt.extra)
			rec := do(t, g, "/v1/chat/completions", `{"model":"x"}`, map[string]string{"X-Session-ID": "s", tt.header: secret})
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			assert.Equal(t, "unknown_tier", errorCodeOf(t, rec.Body.String()))
			assert.Equal(t, tt.echoed, strings.Contains(rec.Body.String(), secret), rec.Body.String())
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			req.Header.Set("X-Session-ID", "s")
			req.Header.Set(tt.header, secret)
			_, err := g.Decide(req, []byte(`{"model":"x"}`), nil)
			require.Error(t, err)
			assert.Equal(t, tt.echoed, strings.Contains(err.Error(), secret), "Decide: %v", err)
		})
	}
}

// With every backend down, each kind of request gets the same 503 message: a POST with a
// session (the Scheduler's), a GET /v1/models, a POST without a session, a GET with one.
// (Before: the requests routed without a binding said `no eligible backend: tier ""`.)
// Each carries Retry-After: limits.retry_after_seconds, as the 503 overloaded does.
func TestAllDownSameMessage(t *testing.T) {
	g, _ := testGateway(t, "health: {enabled: false}\nlimits: {retry_after_seconds: 3}\n")
	for _, id := range []string{"b0", "b1", "b2"} {
		g.Scheduler().OnBackendDown(id)
	}
	const want = "all 3 candidates are down"
	tests := []struct {
		name, method, path string
		session            string
	}{
		{"generation call with a session", http.MethodPost, "/v1/chat/completions", "s1"},
		{"generation call without a session", http.MethodPost, "/v1/chat/completions", ""},
		{"models", http.MethodGet, "/v1/models", ""},
		{"models with a session", http.MethodGet, "/v1/models", "s1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = http.NoBody
			if tt.method == http.MethodPost {
				body = strings.NewReader(chatBody)
			}
			req := httptest.NewRequest(tt.method, tt.path, body)
			if tt.session != "" {
				req.Header.Set("X-Session-ID", tt.session)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "no_backend_available", errorCodeOf(t, rec.Body.String()))
			assert.Contains(t, rec.Body.String(), want)
			assert.Equal(t, "3", rec.Header().Get("Retry-After"))
		})
	}
}
