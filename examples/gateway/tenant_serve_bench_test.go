package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkServeHTTPCacheSalt: one proxied 1 MiB chat request with tenant scoping, with
// tenant.cache_salt off and on. B/op is what the gateway allocates per request (the body
// buffer included); the difference between the two is the cost of the salt rewrite.
func BenchmarkServeHTTPCacheSalt(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	reqBody := []byte(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"` +
		string(bytes.Repeat([]byte("x"), 1<<20)) + `"}]}`)
	for _, salt := range []bool{false, true} {
		name := "cache_salt=off"
		if salt {
			name = "cache_salt=on"
		}
		b.Run(name, func(b *testing.B) {
			g := cannedGateway(b, fmt.Sprintf("backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\ntenant: {api_key: true, cache_salt: %t}\n", salt), resp)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			b.SetBytes(int64(len(reqBody)))
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(reqBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk-bench")
				req.Header.Set("X-Session-ID", "session-1")
				clear(w.h)
				g.ServeHTTP(w, req)
			}
		})
	}
}
