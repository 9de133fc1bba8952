package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// cannedBackend answers every request in memory with a chat.completion-sized JSON body,
// so the benchmark measures the gateway's own work per request (routing, headers, body
// handling, metadata injection), not sockets.
// cannedGateway returns a gateway of the YAML config whose backends all answer resp
// (cannedBackend), closed when the benchmark ends.
func cannedGateway(b *testing.B, yaml string, resp []byte) *gateway.Gateway {
	b.Helper()
	return transportGateway(b, yaml, cannedBackend{resp})
}

// transportGateway returns a gateway of the YAML config whose requests to backends go
// through rt, closed when the benchmark ends.
func transportGateway(b *testing.B, yaml string, rt http.RoundTripper) *gateway.Gateway {
	b.Helper()
	cfg, err := gateway.ParseConfig([]byte(yaml))
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.WithTransport(rt))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	return g
}

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
	g := cannedGateway(b, "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n  - {id: b1, url: \"http://127.0.0.1:10\"}\n", resp)
	reqBody := []byte(`{"model":"m","max_tokens":4,"messages":[{"role":"system","content":"` +
		string(bytes.Repeat([]byte("You are a careful coding agent. "), 100)) + `"},{"role":"user","content":"run the tests"}]}`)
	b.SetBytes(int64(len(reqBody) + len(resp)))
	serveLoop(b, g, reqBody, "")
}

// serveLoop posts reqBody as session-1's chat completion to g on every iteration of b
// (allocations reported); with wantBackend set, each response must name that backend.
func serveLoop(b *testing.B, g *gateway.Gateway, reqBody []byte, wantBackend string) {
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", "session-1")
		clear(w.h)
		g.ServeHTTP(w, req)
		if got := w.h.Get(gateway.HeaderBackend); wantBackend != "" && got != wantBackend {
			b.Fatalf("backend header %q", got)
		}
	}
}

// BenchmarkServeHTTPLoopback is BenchmarkServeHTTP through the default backend client
// (backend_client: direct) to a backend on a loopback socket, so it counts what the
// gateway does per request on that path too: the keep-alive pool, the writes and reads
// of the backend connection, the response parse. The backend is a minimal HTTP/1.1
// responder in this process (no net/http server, so that its allocations stay out of
// the count; its CPU is in ns/op).
func BenchmarkServeHTTPLoopback(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"[fakevllm simulator] ok"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":812,"completion_tokens":4,"total_tokens":816,"prompt_tokens_details":{"cached_tokens":800}}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go cannedHTTP(ln, append([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(resp))+"\r\n\r\n"), resp...))
	cfg, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://" + ln.Addr().String() + "\"}\n"))
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	reqBody := []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"ping"}]}`)
	serveLoop(b, g, reqBody, "b0")
}

// cannedHTTP answers every HTTP/1.1 request on ln's connections with answer (requests
// with a Content-Length body only, as the gateway sends them).
func cannedHTTP(ln net.Listener, answer []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				n := int64(0)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if len(line) <= 2 {
						break
					}
					if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
						n, _ = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
					}
				}
				if _, err := br.Discard(int(n)); err != nil {
					return
				}
				if _, err := c.Write(answer); err != nil {
					return
				}
			}
		}()
	}
}

// BenchmarkMemoryPerSession: live heap per session after 200,000 sessions (36-byte
// UUID-style session IDs, one turn each, as Claude Code sends them) made through the
// gateway itself: the binding table, the session key it owns, and everything else a
// session leaves behind in the gateway once its request is done. "tenant" scopes every
// session by a tenant header (tenant: {header: X-Tenant-ID}), which lengthens each
// binding key by the 25-byte tenant tag. B/session: live heap after a full GC;
// RSS-B/session (Linux): resident memory grown while filling, which is higher by the
// garbage collector's headroom (the heap grows up to GOGC % past the live heap between
// collections) and the runtime's own memory (see docs/peers.md, "Compared with HAProxy and
// nginx"). One op fills a fresh gateway: run with -benchtime 1x.
func BenchmarkMemoryPerSession(b *testing.B) {
	const sessions = 200_000
	resp := []byte(`{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":1}}`)
	reqBody := []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct{ name, extra string }{
		{"plain", ""},
		{"tenant", "tenant: {header: X-Tenant-ID}\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.Setenv(gateway.DefaultTenantSecretEnv, "benchmark-secret")
			var per, rssPer float64
			for range b.N {
				cfg, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n" +
					"  - {id: b1, url: \"http://127.0.0.1:10\"}\n  - {id: b2, url: \"http://127.0.0.1:11\"}\n" + tc.extra))
				if err != nil {
					b.Fatal(err)
				}
				w := &discardWriter{h: http.Header{}}
				debug.FreeOSMemory() // a GC that also returns the previous fill's pages to the OS
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				rssBefore := rssBytes()
				g, err := gateway.New(cfg, gateway.WithTransport(cannedBackend{resp}))
				if err != nil {
					b.Fatal(err)
				}
				for i := range sessions {
					req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i))
					req.Header.Set("X-Tenant-ID", fmt.Sprintf("tenant-%d", i%100))
					clear(w.h)
					g.ServeHTTP(w, req)
				}
				rss := rssBytes() - rssBefore
				runtime.GC()
				runtime.ReadMemStats(&after)
				if n := g.Scheduler().Len(); n != sessions {
					b.Fatalf("%d bindings, want %d", n, sessions)
				}
				per = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / sessions
				rssPer = float64(rss) / sessions
				runtime.KeepAlive(g)
				g.Close()
			}
			b.ReportMetric(per, "B/session")
			if rssPer > 0 {
				b.ReportMetric(rssPer, "RSS-B/session")
			}
		})
	}
}

// rssBytes returns the process's resident set size from /proc/self/statm (Linux), 0
// where that cannot be read.
func rssBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
