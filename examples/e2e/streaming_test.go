package e2e_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// SSE passes through chunk by chunk: the client reads the first event while the backend
// is still blocked before writing the rest.
func TestStreamingIsNotBuffered(t *testing.T) {
	release := make(chan struct{})
	timedOut := make(chan bool, 1)
	sse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" { // the active prober's first round
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			timedOut <- false
		case <-time.After(10 * time.Second): // only reached when the gateway buffers
			timedOut <- true
		}
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	defer sse.Close()

	c := &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	c.start(gateway.Config{Backends: []gateway.BackendConfig{{ID: "sse", URL: sse.URL}}})

	req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", "stream-1")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "sse", resp.Header.Get(gateway.HeaderBackend))
	assert.Equal(t, "false", resp.Header.Get(gateway.HeaderAffinityHit))
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: {\"n\":1}\n", first)
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n", string(rest))
	assert.False(t, <-timedOut, "the first event reached the client only after the backend finished: buffered")
}

// A real fakevllm stream through the gateway: many chunks, [DONE], no metadata injected.
func TestStreamingFromSimulator(t *testing.T) {
	c := newCluster(t, 3, nil)
	body := `{"model":"fake-model","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`
	r := c.post("/v1/chat/completions", map[string]string{"X-Session-ID": "s-stream"}, []byte(body))
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, r.backend, r.fakeFrom)
	assert.Contains(t, r.header.Get("Content-Type"), "text/event-stream")
	events := strings.Count(string(r.body), "data: ")
	assert.GreaterOrEqual(t, events, 7, "role + 5 tokens + finish + [DONE]")
	assert.True(t, strings.HasSuffix(string(r.body), "data: [DONE]\n\n"))
	assert.NotContains(t, string(r.body), gateway.MetadataKey)
}
