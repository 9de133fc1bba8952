package fakevllm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// noSleep makes every simulated wait instant (it still honours cancellation).
var noSleep = fakevllm.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() })

func start(t *testing.T, cfg fakevllm.Config, opts ...fakevllm.Option) (*fakevllm.Server, *httptest.Server) {
	t.Helper()
	srv, err := fakevllm.New(cfg, opts...)
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return srv, ts
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func msgs(pairs ...string) []map[string]string {
	out := make([]map[string]string, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, map[string]string{"role": pairs[i], "content": pairs[i+1]})
	}
	return out
}

func post(t *testing.T, ctx context.Context, url string, body any) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, raw
}

func chat(t *testing.T, url string, body any) completion {
	t.Helper()
	resp, raw := post(t, context.Background(), url, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", raw)
	var c completion
	require.NoError(t, json.Unmarshal(raw, &c))
	return c
}

// gate is a controllable sleep: every call is recorded and then blocks until open is
// closed (or the request's context ends).
type gate struct {
	mu    sync.Mutex
	calls []time.Duration
	open  chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) sleep(ctx context.Context, d time.Duration) error {
	g.mu.Lock()
	g.calls = append(g.calls, d)
	g.mu.Unlock()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) recorded() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.calls...)
}
