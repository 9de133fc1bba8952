package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// cannedBackend answers every request in memory with a chat.completion-sized JSON body,
// so the benchmark measures the gateway's own work per request (routing, headers, body
// handling, metadata injection), not sockets.
type cannedBackend struct{ body []byte }

func (c cannedBackend) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(c.body)))
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(bytes.NewReader(c.body)),
		ContentLength: int64(len(c.body)), Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkServeHTTP: one proxied non-streaming request of a returning session (an
// affinity hit). Compare runs with benchstat (-count 6).
func BenchmarkServeHTTP(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"[fakevllm simulator] ok"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":812,"completion_tokens":4,"total_tokens":816,"prompt_tokens_details":{"cached_tokens":800}}}`)
	cfg, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n  - {id: b1, url: \"http://127.0.0.1:10\"}\n"))
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.WithTransport(cannedBackend{resp}))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	reqBody := []byte(`{"model":"m","max_tokens":4,"messages":[{"role":"system","content":"` +
		string(bytes.Repeat([]byte("You are a careful coding agent. "), 100)) + `"},{"role":"user","content":"run the tests"}]}`)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.SetBytes(int64(len(reqBody) + len(resp)))
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", "session-1")
		clear(w.h)
		g.ServeHTTP(w, req)
	}
}
