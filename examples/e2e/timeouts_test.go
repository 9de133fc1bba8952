package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// hungBackend accepts TCP connections and never answers.
func hungBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// Point 4: a backend that accepts and never answers gets the client a JSON 504 within
// response_header_seconds, and three of them eject it.
func TestHungBackend(t *testing.T) {
	const bound = 300 * time.Millisecond
	url := hungBackend(t)
	c := newCluster(t, 1, func(cfg *gateway.Config) {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: "hung", URL: url})
		cfg.Timeouts.ResponseHeaderSeconds = bound.Seconds()
		cfg.Health.Enabled = new(false) // the prober would hang on it too; this is about the request path
	})
	var ids []string
	for i := 0; len(ids) < 3; i++ {
		require.Less(t, i, 200)
		sid := fmt.Sprintf("hung-%d", i)
		start := time.Now()
		r := c.chat(sid, []msg{{Role: "user", Content: "hi"}})
		took := time.Since(start)
		if r.backend != "hung" {
			require.Equal(t, http.StatusOK, r.status)
			continue
		}
		ids = append(ids, sid)
		assert.Equal(t, http.StatusGatewayTimeout, r.status)
		code, msg := errorCode(t, r.body)
		assert.Equal(t, "backend_timeout", code)
		assert.Contains(t, msg, "no response headers within 300ms")
		assert.GreaterOrEqual(t, took, bound)
		assert.Less(t, took, bound+2*time.Second, "504 within the configured bound")
	}
	assert.Equal(t, []string{"hung"}, c.gw.PassivelyDown(), "3 timeouts are 3 connection failures: ejected")
	assert.Equal(t, 3.0, counter(c.metrics(), gateway.MetricRequests, map[string]string{"code_class": "5xx", "source": "gateway"}))
	r := c.chat(ids[0], []msg{{Role: "user", Content: "again"}})
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "b1", r.backend)
}

// Point 4: a stream that goes silent for stream_idle_seconds is cut and counted.
func TestStalledStream(t *testing.T) {
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // silent until the gateway gives up
	}))
	t.Cleanup(stalled.Close)
	fine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(fine.Close)
	c := &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	c.start(gateway.Config{
		Backends:         []gateway.BackendConfig{{ID: "stall", URL: stalled.URL}, {ID: "fine", URL: fine.URL}},
		Timeouts:         gateway.TimeoutsConfig{StreamIdleSeconds: 0.3},
		OutlierDetection: gateway.OutlierConfig{ConsecutiveConnectFailures: 1},
		Health:           gateway.HealthConfig{Enabled: new(false)},
	})
	var resp *http.Response
	for i := 0; i < 100 && resp == nil; i++ {
		req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("X-Session-ID", fmt.Sprintf("stall-%d", i))
		resp, err = c.client.Do(req)
		require.NoError(t, err)
		if resp.Header.Get(gateway.HeaderBackend) != "stall" {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			resp = nil
		}
	}
	require.NotNil(t, resp, "no session landed on the stalled backend")
	defer resp.Body.Close()
	start := time.Now()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: {\"n\":1}\n", first)
	_, err = io.ReadAll(br)
	assert.Error(t, err, "the client sees a cut stream, not a clean end")
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, []string{"stall"}, c.gw.PassivelyDown(), "a stalled stream is a connection failure")
}

// Point 4: slow clients — headers one byte at a time, or a body one byte at a time —
// are cut after read_header_seconds / read_body_seconds; 200 of them at once leave no
// goroutine behind.
func TestSlowClientFlood(t *testing.T) {
	b := startBackend(t, "b1")
	cfg := gateway.Config{
		Backends: []gateway.BackendConfig{{ID: "b1", URL: b.url}},
		Timeouts: gateway.TimeoutsConfig{ReadHeaderSeconds: 0.5, ReadBodySeconds: 0.5},
		Health:   gateway.HealthConfig{Enabled: new(false)},
	}
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	ln := serveGateway(t, g)
	before := goroutines()

	const n = 200
	start := time.Now()
	took := make([]time.Duration, n)
	answers := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if !assert.NoError(t, err) {
				return
			}
			defer conn.Close()
			var trickle string
			if i%2 == 0 { // slow headers
				trickle = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Session-ID: slow\r\n"
			} else { // complete headers, slow body
				_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Session-ID: slow\r\nContent-Length: 100000\r\n\r\n")
				trickle = strings.Repeat(" ", 1000)
			}
			read := make(chan []byte, 1)
			go func() { data, _ := io.ReadAll(conn); read <- data }()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for j := 0; ; j++ {
				select {
				case data := <-read:
					took[i], answers[i] = time.Since(start), string(data)
					return
				case <-tick.C:
					_, _ = conn.Write([]byte{trickle[j%len(trickle)]})
				}
			}
		})
	}
	wg.Wait()
	var slowest time.Duration
	for i := range n {
		slowest = max(slowest, took[i])
		if i%2 == 1 {
			assert.True(t, strings.HasPrefix(answers[i], "HTTP/1.1 408"), "slow body gets a 408: %.60q", answers[i])
		}
	}
	t.Logf("%d slow clients cut, the last after %v", n, slowest)
	assert.Less(t, slowest, 3*time.Second, "every slow client cut within the bound (0.5 s + scheduling)")
	assert.Eventually(t, func() bool { return goroutines() <= before+5 }, 3*time.Second, 20*time.Millisecond,
		"goroutines back to %d", before)
}

func goroutines() int { return runtime.NumGoroutine() }

// Point 4: stream_idle_seconds times the backend, not the client: a client that stops
// reading for longer (the proxy blocked writing to it) does not get the stream cut and
// the backend is not blamed.
func TestSlowReaderIsNotBackendIdle(t *testing.T) {
	const size = 16 << 20 // more than the loopback socket buffers hold
	chunk := strings.Repeat("x", 32<<10)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range size / len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(fast.Close)
	c := &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	c.start(gateway.Config{
		Backends:         []gateway.BackendConfig{{ID: "fast", URL: fast.URL}, {ID: "spare", URL: fast.URL}},
		Timeouts:         gateway.TimeoutsConfig{StreamIdleSeconds: 0.2},
		OutlierDetection: gateway.OutlierConfig{ConsecutiveConnectFailures: 1},
		Health:           gateway.HealthConfig{Enabled: new(false)},
	})
	req, err := http.NewRequest(http.MethodPost, c.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	require.NoError(t, err)
	req.Header.Set("X-Session-ID", "slow-reader")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	head := make([]byte, 1024)
	_, err = io.ReadFull(resp.Body, head)
	require.NoError(t, err)
	<-time.After(600 * time.Millisecond) // the client reads nothing for 3 x stream_idle_seconds
	n, err := io.Copy(io.Discard, resp.Body)
	require.NoError(t, err, "the stream is complete")
	assert.Equal(t, int64(size-len(head)), n)
	assert.Empty(t, c.gw.PassivelyDown())
}
