package fakevllm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

func TestNonStreamingResponse(t *testing.T) {
	_, ts := start(t, fakevllm.Config{ID: "b7"}, noSleep)
	resp, raw := post(t, context.Background(), ts.URL, map[string]any{"model": "my-model", "messages": msgs("user", "hi"), "max_completion_tokens": 5})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))
	assert.Equal(t, "b7", resp.Header.Get("X-Fakevllm-Backend"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var c completion
	require.NoError(t, json.Unmarshal(raw, &c))
	assert.Equal(t, "chat.completion", c.Object)
	assert.Equal(t, "my-model", c.Model)
	require.Len(t, c.Choices, 1)
	assert.Equal(t, "assistant", c.Choices[0].Message.Role)
	assert.Equal(t, "[fakevllm simulator] simulated tokens from a", c.Choices[0].Message.Content)
	assert.Equal(t, "length", c.Choices[0].FinishReason)
	assert.Equal(t, 5, c.Usage.CompletionTokens)

	c = chat(t, ts.URL, map[string]any{"messages": msgs("user", "hi")})
	assert.Equal(t, "fake-model", c.Model)
	assert.Equal(t, "stop", c.Choices[0].FinishReason)
	assert.Equal(t, fakevllm.DefaultMaxTokens, c.Usage.CompletionTokens)
}

func TestMetricsEndpoint(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{ID: "b1", BlockTokens: 4}, noSleep)
	m := msgs("system", strings.Repeat("a", 200), "user", "hi")
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 2})
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 2})

	require.NoError(t, testutil.GatherAndCompare(srv.Registry(), strings.NewReader(`
# HELP vllm:prefix_cache_hits_total [fakevllm simulator, not vLLM] Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{backend="b1",model_name="fake-model"} 68
# HELP vllm:prefix_cache_queries_total [fakevllm simulator, not vLLM] Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{backend="b1",model_name="fake-model"} 142
# HELP vllm:generation_tokens_total [fakevllm simulator, not vLLM] Number of generation tokens processed (simulated).
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{backend="b1",model_name="fake-model"} 4
`), "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:generation_tokens_total"))

	resp, err := http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text := string(raw)
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{backend="b1",model_name="fake-model"} 142`,
		`vllm:prefix_cache_hits_total{backend="b1",model_name="fake-model"} 68`,
		`vllm:num_requests_running{backend="b1",model_name="fake-model"} 0`,
		`vllm:num_requests_waiting{backend="b1",model_name="fake-model"} 0`,
		`fakevllm_simulator_info{backend="b1",model_name="fake-model"} 1`,
		`fakevllm simulator`,
	} {
		assert.Contains(t, text, want)
	}
}

func TestHealthAndModels(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{Model: "m1"}, noSleep)
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))
		return resp.StatusCode, string(raw)
	}
	code, _ := get("/health")
	assert.Equal(t, http.StatusOK, code)
	srv.SetHealthy(false)
	assert.False(t, srv.Healthy())
	code, body := get("/health")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, `"code":"unhealthy"`)
	srv.SetHealthy(true)
	code, _ = get("/health")
	assert.Equal(t, http.StatusOK, code)

	code, body = get("/v1/models")
	require.Equal(t, http.StatusOK, code)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	assert.Equal(t, "list", list.Object)
	require.Len(t, list.Data, 1)
	assert.Equal(t, "m1", list.Data[0].ID)
	assert.Equal(t, "fakevllm-simulator", list.Data[0].OwnedBy)
}

func TestBadRequests(t *testing.T) {
	srv, ts := start(t, fakevllm.Config{}, noSleep)
	huge := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", fakevllm.MaxRequestBodyBytes) + `"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed JSON", http.MethodPost, "/v1/chat/completions", `{"messages":`, 400, "invalid_json"},
		{"not an object", http.MethodPost, "/v1/chat/completions", `[1,2]`, 400, "invalid_json"},
		{"no messages", http.MethodPost, "/v1/chat/completions", `{"model":"m"}`, 400, "invalid_messages"},
		{"empty messages", http.MethodPost, "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_messages"},
		{"missing role", http.MethodPost, "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "invalid_messages"},
		{"bad content", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":{}}]}`, 400, "invalid_json"},
		{"max_tokens 0", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "invalid_value"},
		{"max_tokens huge", http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":100000}`, 400, "invalid_value"},
		{"wrong method", http.MethodGet, "/v1/chat/completions", ``, 405, "method_not_allowed"},
		{"post to models", http.MethodPost, "/v1/models", `{}`, 405, "method_not_allowed"},
		{"body too large", http.MethodPost, "/v1/chat/completions", huge, 413, "request_too_large"},
		{"unknown path", http.MethodGet, "/v1/embeddings", ``, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.status, resp.StatusCode, "body %s", raw)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Equal(t, "simulator", resp.Header.Get("X-Fakevllm"))
			var e apiError
			require.NoError(t, json.Unmarshal(raw, &e), "body %s", raw)
			assert.Equal(t, tc.code, e.Error.Code)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			assert.Contains(t, e.Error.Message, "fakevllm simulator")
			if tc.status == 405 {
				assert.NotEmpty(t, resp.Header.Get("Allow"))
			}
		})
	}
	assert.Zero(t, srv.Stats().Requests)
	assert.Equal(t, uint64(12), srv.Stats().Rejected)
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []fakevllm.Config{
		{BlockTokens: -1}, {CacheBlocks: -1}, {PrefillPerToken: -1}, {DecodePerToken: -1},
		{MaxConcurrent: -1}, {TimeScale: -0.5}, {DefaultMaxTokens: -1}, {DefaultMaxTokens: fakevllm.MaxOutputTokens + 1},
	} {
		_, err := fakevllm.New(cfg)
		assert.True(t, errors.Is(err, fakevllm.ErrInvalidConfig), "%+v: %v", cfg, err)
	}
	srv, err := fakevllm.New(fakevllm.Config{})
	require.NoError(t, err)
	assert.Equal(t, fakevllm.Config{
		ID: "fakevllm", Model: "fake-model", BlockTokens: 16, CacheBlocks: 4096, PrefillPerToken: time.Millisecond,
		DecodePerToken: 20 * time.Millisecond, MaxConcurrent: 4, TimeScale: 1, DefaultMaxTokens: 64,
	}, srv.Config())
}
