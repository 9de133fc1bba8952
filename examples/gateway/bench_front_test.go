package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// BenchmarkFrontLoopback is BenchmarkServeHTTPLoopback with the front server too: the
// gateway served by [gateway.Gateway.Serve] on a loopback listener (server: nethttp or
// direct), one keep-alive client connection sending one request at a time (concurrency
// 1, a raw client: http.Request.Write and http.ReadResponse, no net/http.Transport
// goroutines), the backend a minimal responder in this process. ns/op is the round trip
// through both servers on shared cores; it is the front server's share that differs.
func BenchmarkFrontLoopback(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":812,"completion_tokens":4,"total_tokens":816}}`)
	be, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	go cannedHTTP(be, append([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(resp))+"\r\n\r\n"), resp...))
	reqBody := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"ping"}]}`
	for _, server := range servers {
		b.Run("server="+server, func(b *testing.B) {
			cfg, err := gateway.ParseConfig([]byte("server: " + server + "\nhealth: {enabled: false}\nbackends:\n  - {id: b0, url: \"http://" + be.Addr().String() + "\"}\n"))
			if err != nil {
				b.Fatal(err)
			}
			g, err := gateway.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- g.Serve(ctx, ln) }()
			defer func() { cancel(); <-done }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Session-ID: session-1\r\n" +
				"Content-Length: " + strconv.Itoa(len(reqBody)) + "\r\n\r\n" + reqBody
			br := bufio.NewReader(c)
			b.ReportAllocs()
			cs0 := contextSwitches()
			for b.Loop() {
				if _, err := io.WriteString(c, raw); err != nil {
					b.Fatal(err)
				}
				r, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, r.Body); err != nil || r.StatusCode != http.StatusOK {
					b.Fatalf("%d %v", r.StatusCode, err)
				}
			}
			if cs0 >= 0 {
				b.ReportMetric(float64(contextSwitches()-cs0)/float64(b.N), "ctxsw/op")
			}
		})
	}
}

// contextSwitches sums the voluntary and involuntary context switches of this process's
// threads (/proc/self/task/*/status); -1 where that is not readable.
func contextSwitches() int64 {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}
