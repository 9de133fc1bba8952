package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// require_session rejects session-less generation requests only: GET /v1/models and the
// other session-less endpoints are proxied.
func TestRequireSessionOnlyForGeneration(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"path":"` + r.URL.Path + `"}`))
	}))
	t.Cleanup(backend.Close)
	cfg, err := gateway.ParseConfig([]byte("require_session: true\nbackends:\n  - {id: b0, url: \"" + backend.URL + "\"}\n"))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)

	tests := []struct {
		method, path string
		session      string
		want         int
	}{
		{http.MethodGet, "/v1/models", "", http.StatusOK},
		{http.MethodGet, "/v1/models/", "", http.StatusOK},
		{http.MethodGet, "/health", "", http.StatusOK},
		{http.MethodGet, "/version", "", http.StatusOK},
		{http.MethodPost, "/tokenize", "", http.StatusOK},
		{http.MethodPost, "/v1/embeddings", "", http.StatusOK},
		{http.MethodPost, "/v1/chat/completions", "", http.StatusBadRequest},
		{http.MethodPost, "/v1/completions", "", http.StatusBadRequest},
		{http.MethodPost, "/v1/responses", "", http.StatusBadRequest},
		{http.MethodPost, "/v1/messages", "", http.StatusBadRequest},
		{http.MethodPost, "/v1/chat/completions", "s1", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" session="+tt.session, func(t *testing.T) {
			var body *strings.Reader
			if tt.method == http.MethodPost {
				body = strings.NewReader(`{"model":"m"}`)
			} else {
				body = strings.NewReader("")
			}
			req := httptest.NewRequest(tt.method, tt.path, body)
			if tt.method == http.MethodPost {
				req.Header.Set("Content-Type", "application/json")
			}
			if tt.session != "" {
				req.Header.Set("X-Session-ID", tt.session)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			require.Equal(t, tt.want, rec.Code, rec.Body.String())
			if tt.want == http.StatusOK {
				assert.Contains(t, rec.Body.String(), `"path":"`+tt.path+`"`, "proxied to the backend")
			} else {
				assert.Contains(t, rec.Body.String(), "missing_session_id")
			}
		})
	}
}
