package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// BenchmarkServeHTTPStream: one proxied streaming chat completion of a returning
// session (an affinity hit): a canned backend answers text/event-stream, one event per
// body Read (8 content chunks, then the usage chunk vLLM sends with
// stream_options.include_usage, then [DONE]), each flushed to a writer that supports
// flushing and read deadlines as net/http's does (so that only the gateway's own work is
// counted).
func BenchmarkServeHTTPStream(b *testing.B) {
	g := transportGateway(b, "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n  - {id: b1, url: \"http://127.0.0.1:10\"}\n", streamBackend{streamEvents()})
	reqBody := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":8,` +
		`"messages":[{"role":"user","content":"run the tests"}]}`)
	streamLoop(b, g, reqBody)
}

// BenchmarkServeHTTPStreamUsage: BenchmarkServeHTTPStream for a client that does not ask
// for the usage, with stream_usage off (the request and the stream pass as they are) and
// on (the request is rewritten to ask, and the usage chunk is taken out of the stream).
func BenchmarkServeHTTPStreamUsage(b *testing.B) {
	reqBody := []byte(`{"model":"m","stream":true,"max_tokens":8,` +
		`"messages":[{"role":"user","content":"run the tests"}]}`)
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			g := transportGateway(b, fmt.Sprintf("stream_usage: %v\nbackends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n"+
				"  - {id: b1, url: \"http://127.0.0.1:10\"}\n", on), streamBackend{streamEvents()})
			streamLoop(b, g, reqBody)
		})
	}
}

// streamEvents is the canned stream: 8 content chunks, the usage chunk vLLM sends with
// stream_options.include_usage, then [DONE].
func streamEvents() [][]byte {
	var events [][]byte
	for i := range 8 {
		events = append(events, []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m",`+
			`"choices":[{"index":0,"delta":{"content":"tok`+strings.Repeat("x", i)+`"},"finish_reason":null}]}`+"\n\n"))
	}
	return append(events,
		[]byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],`+
			`"usage":{"prompt_tokens":812,"completion_tokens":8,"total_tokens":820}}`+"\n\n"),
		[]byte("data: [DONE]\n\n"))
}

// streamLoop posts reqBody as session-1's streaming chat completion to g on every
// iteration of b (allocations reported).
func streamLoop(b *testing.B, g *gateway.Gateway, reqBody []byte) {
	w := &flushWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", "session-1")
		clear(w.h)
		g.ServeHTTP(w, req)
		if w.h.Get(gateway.HeaderBackend) == "" {
			b.Fatal("no backend header")
		}
	}
}

// streamBackend answers every request with an event stream of events, one per Read.
type streamBackend struct{ events [][]byte }

func (s streamBackend) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: &eventReader{events: s.events},
		ContentLength: -1, Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// eventReader returns one event per Read (p is assumed large enough), then io.EOF.
type eventReader struct {
	events [][]byte
	i      int
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.i == len(r.events) {
		return 0, io.EOF
	}
	n := copy(p, r.events[r.i])
	r.i++
	return n, nil
}

func (r *eventReader) Close() error { return nil }

// flushWriter discards the response and supports Flush and SetReadDeadline, as
// net/http's HTTP/1 response writer does.
type flushWriter struct{ h http.Header }

func (d *flushWriter) Header() http.Header             { return d.h }
func (d *flushWriter) Write(p []byte) (int, error)     { return len(p), nil }
func (d *flushWriter) WriteHeader(int)                 {}
func (d *flushWriter) Flush()                          {}
func (d *flushWriter) SetReadDeadline(time.Time) error { return nil }
