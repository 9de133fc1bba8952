package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestInjectMetadata(t *testing.T) {
	meta := []byte(`{"backend":"b1","affinity_hit":true,"tier":""}`)
	tests := []struct {
		name string
		body string
		ok   bool
		want string
	}{
		{"object", `{"id":"x","n":1}`, true, `{"x_agent_serve":{"backend":"b1","affinity_hit":true,"tier":""},"id":"x","n":1}`},
		{"empty object", `{}`, true, `{"x_agent_serve":{"backend":"b1","affinity_hit":true,"tier":""}}`},
		{"leading space and newline kept", " \n{\"a\":[1]}\n", true, " \n{\"x_agent_serve\":{\"backend\":\"b1\",\"affinity_hit\":true,\"tier\":\"\"},\"a\":[1]}\n"},
		{"array", `[1,2]`, false, `[1,2]`},
		{"string", `"x"`, false, `"x"`},
		{"invalid", `{"a":`, false, `{"a":`},
		{"empty", ``, false, ``},
		{"already present", `{"x_agent_serve":1}`, false, `{"x_agent_serve":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := gateway.InjectMetadata([]byte(tt.body), meta)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, string(got))
			if ok {
				var v map[string]any
				require.NoError(t, json.Unmarshal(got, &v))
				assert.Equal(t, "b1", v["x_agent_serve"].(map[string]any)["backend"])
			}
		})
	}
}

func ExampleInjectMetadata() {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion"}`)
	meta, _ := json.Marshal(gateway.Metadata{Backend: "vllm-a", AffinityHit: true, Tier: "large"})
	out, ok := gateway.InjectMetadata(body, meta)
	fmt.Println(ok)
	fmt.Println(string(out))
	// Output:
	// true
	// {"x_agent_serve":{"backend":"vllm-a","affinity_hit":true,"tier":"large"},"id":"chatcmpl-1","object":"chat.completion"}
}

func ExampleParseConfig() {
	cfg, err := gateway.ParseConfig([]byte(`
listen: 127.0.0.1:8080
affinity: {sticky_ttl_seconds: 1800}
backends:
  - {id: vllm-a, url: "http://10.0.0.5:8000"}
  - {id: vllm-b, url: "http://10.0.0.6:8000", weight: 2}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(cfg.Backends), *cfg.Affinity.StickyTTLSeconds, cfg.SessionHeaders[0], cfg.MaxBodyBytes)

	_, err = gateway.ParseConfig([]byte(`backends: [{id: a, url: "http://h:1"}, {id: a, url: "http://h:2"}]`))
	fmt.Println(err)
	// Output:
	// 2 1800 X-Session-ID 8388608
	// gateway: invalid config: backends[1].id: "a" already used by backends[0]
}

// inject_metadata: false leaves the body untouched; the headers still say where it went.
// It is reloadable.
func TestInjectMetadataConfig(t *testing.T) {
	urls := jsonBackends(t, 1)
	on := yamlConfig(t, urls, []string{"b0"}, []float64{1}, "")
	off := yamlConfig(t, urls, []string{"b0"}, []float64{1}, "inject_metadata: false\n")
	g, err := gateway.New(off)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	rec := send(t, g, "s1")
	assert.Equal(t, `{"id":"cmpl","choices":[]}`, rec.Body.String())
	assert.Equal(t, "b0", rec.Header().Get(gateway.HeaderBackend))
	assert.Equal(t, "true", send(t, g, "s1").Header().Get(gateway.HeaderAffinityHit))

	require.NoError(t, g.Reload(on))
	assert.Equal(t, `{"x_agent_serve":{"backend":"b0","affinity_hit":true,"tier":""},"id":"cmpl","choices":[]}`,
		send(t, g, "s1").Body.String())
}

// A JSON response that announces trailers is not injected: it is forwarded chunked,
// body unchanged, with its trailer, as a plain ReverseProxy does, with both backend
// clients. (Before: the injected body got a Content-Length, the Trailer header stayed
// and the trailer was lost.)
func TestInjectMetadataSkipsTrailers(t *testing.T) {
	const body = `{"id":"cmpl","choices":[]}`
	// declared: a Trailer header names X-T1; undeclared: the trailer is known only at the
	// end of the chunked body, after the gateway has read it.
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Has("undeclared") {
			_, _ = io.WriteString(w, body)
			w.(http.Flusher).Flush() // chunked
			w.Header().Set(http.TrailerPrefix+"X-T1", "v1")
			return
		}
		w.Header().Set("Trailer", "X-T1")
		_, _ = io.WriteString(w, body)
		w.Header().Set("X-T1", "v1")
	}))
	t.Cleanup(be.Close)
	for _, tc := range []struct{ client, query string }{
		{gateway.BackendClientDirect, ""}, {gateway.BackendClientNetHTTP, ""},
		{gateway.BackendClientDirect, "?undeclared"}, {gateway.BackendClientNetHTTP, "?undeclared"},
	} {
		client := tc.client
		t.Run(client+tc.query, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				srv := serveGatewayOn(t, server, client, be.URL)
				resp := postChat(t, srv, tc.query)
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				assert.Equal(t, body, string(got), "not injected")
				assert.Equal(t, int64(-1), resp.ContentLength, "chunked")
				assert.Equal(t, "v1", resp.Trailer.Get("X-T1"), "the trailer arrives")
				assert.Equal(t, "b0", resp.Header.Get(gateway.HeaderBackend), "the headers still carry the metadata")
			})
		})
	}
}

// postChat posts session s1's chat completion {"model":"m"} to the gateway served by srv,
// with query (including its "?", or "") after the path.
func postChat(t *testing.T, srv *front, query string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions"+query, strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", "s1")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	return resp
}
