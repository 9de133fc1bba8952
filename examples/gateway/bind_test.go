package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// statusGateway is a gateway over three backends b0..b2 that answer 200 on /v1/models
// and the generation endpoints, 503 on /v1/busy and 404 elsewhere, configured with extra
// YAML.
func statusGateway(t *testing.T, extra string) *gateway.Gateway {
	t.Helper()
	return gatewayOver3(t, extra, func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/v1/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		case p == "/v1/models" || strings.HasSuffix(p, "/embeddings") || isGenerationPath(p):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		default:
			http.NotFound(w, r)
		}
	})
}

// gatewayOver3 is a gateway over three backends b0..b2, each served by handler,
// configured with extra YAML after the backends (health checks off).
func gatewayOver3(t *testing.T, extra string, handler http.HandlerFunc) *gateway.Gateway {
	t.Helper()
	var yaml strings.Builder
	yaml.WriteString("health: {enabled: false}\nbackends:\n")
	for _, id := range []string{"b0", "b1", "b2"} {
		srv := httptest.NewServer(handler)
		t.Cleanup(srv.Close)
		yaml.WriteString("  - {id: " + id + ", url: \"" + srv.URL + "\"}\n")
	}
	yaml.WriteString(extra)
	cfg, err := gateway.ParseConfig([]byte(yaml.String()))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g
}

// isGenerationPath reports whether p ends in /completions, /responses or /messages,
// with or without a trailing slash.
func isGenerationPath(p string) bool {
	p = strings.TrimSuffix(p, "/")
	return strings.HasSuffix(p, "/completions") || strings.HasSuffix(p, "/responses") || strings.HasSuffix(p, "/messages")
}

func sendReq(g *gateway.Gateway, method, path, body string, headers map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	return rec
}

// Only a generation call (a POST to .../chat/completions, /completions, /responses,
// /messages) binds its session. Any other request with a session header — another
// method, another path, one the backend answers 404 or 503 — is hashed by its session
// (the backend HRW picks for it, where its binding usually is) and stores, reads and
// counts nothing.
func TestOnlyGenerationCallsBind(t *testing.T) {
	g := statusGateway(t, "")
	tests := []struct {
		method, path, body string
		status             int
	}{
		{http.MethodGet, "/v1/models", "", http.StatusOK},
		{http.MethodGet, "/nonexistent", "", http.StatusNotFound},
		{http.MethodGet, "/v1/busy", "", http.StatusServiceUnavailable},
		{http.MethodPost, "/v1/embeddings", `{"model":"m","input":"x"}`, http.StatusOK},
		{http.MethodPost, "/tokenize", `{"model":"m"}`, http.StatusNotFound},
		{http.MethodGet, chat, "", http.StatusOK},       // a generation path, not a POST
		{http.MethodPut, chat, chatBody, http.StatusOK}, // idem
		{http.MethodPost, "/v1/chat/completions/x", chatBody, http.StatusNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			session := fmt.Sprint("fresh-", i)
			for range 2 { // the same backend every time
				rec := sendReq(g, tt.method, tt.path, tt.body, map[string]string{"X-Session-ID": session})
				require.Equal(t, tt.status, rec.Code, rec.Body.String())
				assert.Equal(t, hrwBackend(t, session), rec.Header().Get(gateway.HeaderBackend), "hashed by its session")
				assert.Equal(t, "false", rec.Header().Get(gateway.HeaderAffinityHit))
				assert.Empty(t, rec.Header().Get(gateway.HeaderOutcome), "no placement outcome")
			}
			st := g.Scheduler().Stats()
			assert.Zero(t, st.Bindings, "no binding")
			assert.Zero(t, st.Misses, "no miss counted")
			assert.Zero(t, st.Hits)
		})
	}

	// A bound session's other requests neither refresh nor count against its binding.
	rec := sendReq(g, http.MethodPost, chat, chatBody, map[string]string{"X-Session-ID": "bound"})
	require.Equal(t, "miss", rec.Header().Get(gateway.HeaderOutcome))
	rec = sendReq(g, http.MethodGet, "/v1/models", "", map[string]string{"X-Session-ID": "bound"})
	assert.Equal(t, hrwBackend(t, "bound"), rec.Header().Get(gateway.HeaderBackend))
	assert.Empty(t, rec.Header().Get(gateway.HeaderOutcome))
	rec = sendReq(g, http.MethodPost, chat, chatBody, map[string]string{"X-Session-ID": "bound"})
	assert.Equal(t, "hit", rec.Header().Get(gateway.HeaderOutcome))
	st := g.Scheduler().Stats()
	assert.Equal(t, affinity.Stats{Hits: 1, Misses: 1, Bindings: 1}, st)

	// Every generation endpoint binds, a trailing slash included.
	for _, p := range []string{"/v1/completions", "/v1/responses", "/v1/messages", chat + "/"} {
		sendReq(g, http.MethodPost, p, chatBody, map[string]string{"X-Session-ID": "gen" + p})
	}
	assert.Equal(t, 5, g.Scheduler().Len())
}

// A session ID over max_session_id_bytes is refused on every path, as on a generation
// call, with or without tenant scoping.
func TestUnboundSessionIDTooLong(t *testing.T) {
	for _, extra := range []string{"", "tenant: {api_key: true}\n"} {
		t.Run(extra, func(t *testing.T) {
			g := statusGateway(t, "affinity: {max_session_id_bytes: 8}\n"+extra)
			rec := sendReq(g, http.MethodGet, "/v1/models", "", map[string]string{"X-Session-ID": "123456789"})
			assert.Equal(t, http.StatusBadRequest, rec.Code)
			assert.Contains(t, rec.Body.String(), "session_id_too_long")
			rec = sendReq(g, http.MethodGet, "/v1/models", "", map[string]string{"X-Session-ID": "12345678"})
			assert.Equal(t, http.StatusOK, rec.Code)
		})
	}
}

// A flood of cheap requests with fresh session IDs (GET /nonexistent, GET /v1/models)
// does not flush the bindings of a generating session, whatever the tenant: the binding
// table (max_bindings) is shared by every tenant, so a request that could bind would let
// one client evict everyone's bindings.
func TestNonGenerationFloodKeepsBindings(t *testing.T) {
	for _, tt := range []struct {
		name, extra     string
		victim, flooder map[string]string
	}{
		{"no tenants", "", map[string]string{}, map[string]string{}},
		{"another tenant", "tenant: {api_key: true}\n",
			map[string]string{"Authorization": bearer(keyA)}, map[string]string{"Authorization": bearer(keyB)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := statusGateway(t, "affinity: {max_bindings: 4}\n"+tt.extra)
			victim := func() *httptest.ResponseRecorder {
				h := map[string]string{"X-Session-ID": "victim"}
				for k, v := range tt.victim {
					h[k] = v
				}
				return sendReq(g, http.MethodPost, chat, chatBody, h)
			}
			require.Equal(t, "miss", victim().Header().Get(gateway.HeaderOutcome))
			for i := range 500 {
				h := map[string]string{"X-Session-ID": fmt.Sprint("flood-", i)}
				for k, v := range tt.flooder {
					h[k] = v
				}
				path := "/nonexistent"
				if i%2 == 1 {
					path = "/v1/models"
				}
				sendReq(g, http.MethodGet, path, "", h)
			}
			assert.Equal(t, "hit", victim().Header().Get(gateway.HeaderOutcome), "the victim's binding survived")
			st := g.Scheduler().Stats()
			assert.Zero(t, st.Evictions)
			assert.Equal(t, uint64(1), st.Misses, "the flood counted no miss")
		})
	}
}

// Decide follows the same rule: a request with a session that is not a generation call
// binds nothing and counts nothing, and with require_session only generation calls need
// a session.
func TestDecideBindsGenerationCallsOnly(t *testing.T) {
	g := statusGateway(t, "require_session: true\n")
	r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	r.Header.Set("X-Session-ID", "s1")
	d, err := g.Decide(r, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, hrwBackend(t, "s1"), d.BackendID)
	d.Done()
	assert.Equal(t, affinity.Stats{}, g.Scheduler().Stats())

	d, err = g.Decide(httptest.NewRequest(http.MethodGet, "/v1/models", nil), nil, nil)
	require.NoError(t, err, "require_session does not apply to GET /v1/models")
	d.Done()

	r = httptest.NewRequest(http.MethodPost, chat, strings.NewReader(chatBody))
	r.Header.Set("X-Session-ID", "s1")
	d, err = g.Decide(r, []byte(chatBody), nil)
	require.NoError(t, err)
	d.Done()
	assert.Equal(t, 1, g.Scheduler().Len())
}
