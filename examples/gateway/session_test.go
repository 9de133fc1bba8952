package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
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

// A session ID over max_session_id_bytes is a 400 session_id_too_long whose message names
// the header it came from: with several session_headers a client must know which one to
// shorten (tester46). Generation and other calls, tenant scoping on and off, ServeHTTP
// and Decide.
func TestSessionTooLongNamesHeader(t *testing.T) {
	long := strings.Repeat("x", 9)
	for _, extra := range []string{"", "tenant: {api_key: true}\n"} {
		g, _ := testGateway(t, "session_headers: [X-Session-ID, X-Agent-Session]\naffinity: {max_session_id_bytes: 8}\n"+extra)
		for _, tt := range []struct {
			path, header string
		}{
			{"/v1/chat/completions", "X-Session-ID"},
			{"/v1/chat/completions", "X-Agent-Session"},
			{"/tokenize", "X-Agent-Session"}, // not a generation call: hashed by its session, unbound
		} {
			t.Run(extra+tt.path+" "+tt.header, func(t *testing.T) {
				h := map[string]string{tt.header: long}
				if tt.header == "X-Agent-Session" {
					h["X-Session-ID"] = "   " // blank: the next header is used
				}
				rec := do(t, g, tt.path, chatBody, h)
				require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
				assert.Equal(t, "session_id_too_long", errorCodeOf(t, rec.Body.String()))
				assert.Contains(t, rec.Body.String(), "9 bytes (max 8)")
				assert.Contains(t, rec.Body.String(), "(header "+tt.header+")")

				_, err := g.Decide(decideReq(chatBody, h), []byte(chatBody), nil)
				require.ErrorIs(t, err, affinity.ErrSessionIDTooLong)
				assert.ErrorContains(t, err, "(header "+tt.header+")")
			})
		}
		assert.Zero(t, g.Scheduler().Len(), "nothing bound")
	}
}
