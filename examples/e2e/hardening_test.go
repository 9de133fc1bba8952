package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

// always503 answers 503 to every request but GET /health, which says 200: the backend
// that active health checks cannot catch.
func always503(t *testing.T, hits *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"engine dead","type":"server_error"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// firstTurnsOn sends first turns of new sessions (prefix-0, prefix-1, ...) until want of
// them landed on backend id, and returns those sessions' IDs and results.
func firstTurnsOn(c *cluster, id, prefix string, want int) ([]string, []chatResult) {
	c.t.Helper()
	var ids []string
	var rs []chatResult
	for i := 0; len(ids) < want; i++ {
		require.Less(c.t, i, 500, "no session landed on %s", id)
		sid := fmt.Sprintf("%s-%d", prefix, i)
		r := c.chat(sid, []msg{{Role: "user", Content: "hi"}})
		if r.backend == id {
			ids, rs = append(ids, sid), append(rs, r)
		} else {
			require.Equal(c.t, http.StatusOK, r.status, "%s on %s: %s", sid, r.backend, r.body)
		}
	}
	return ids, rs
}

// Point 3: a backend answering 503 to everything while /health says 200 is ejected
// after consecutive_5xx (5) responses, takes no new placements, shows as ejected in the
// metrics and the log, comes back after base_ejection_seconds and is ejected for twice
// as long the second time.
func TestBackend503WhileHealthy(t *testing.T) {
	var hits atomic.Int64
	url := always503(t, &hits)
	c := newCluster(t, 2, func(cfg *gateway.Config) {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: "bad", URL: url})
	})
	ids, rs := firstTurnsOn(c, "bad", "s503", 5)
	for _, r := range rs {
		assert.Equal(t, http.StatusServiceUnavailable, r.status, "the backend's own 503 passes through")
	}
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown(), "ejected after 5 consecutive 5xx")
	assert.Equal(t, health.Down, c.gw.Scheduler().Health().State("bad"))
	assert.Equal(t, int64(5), hits.Load())

	mf := c.metrics()
	assert.Equal(t, 0.0, gauge(mf, gateway.MetricBackendUp, map[string]string{"backend": "bad"}))
	assert.Equal(t, 1.0, gauge(mf, gateway.MetricBackendUp, map[string]string{"backend": "b1"}))
	assert.Equal(t, 1.0, gauge(mf, gateway.MetricBackendState, map[string]string{"backend": "bad", "state": "ejected"}))
	assert.Equal(t, 0.0, gauge(mf, gateway.MetricBackendState, map[string]string{"backend": "bad", "state": "healthy"}))
	assert.Equal(t, 1.0, counter(mf, gateway.MetricBackendEjections, map[string]string{"backend": "bad"}))
	assert.Equal(t, 5.0, counter(mf, gateway.MetricRequests, map[string]string{"code_class": "5xx", "source": "backend"}))
	assert.Equal(t, 5.0, counter(mf, "agentserve_affinity_broken_total", map[string]string{"reason": "down"}), "its 5 bindings broken at ejection")

	recs := c.logs.records("backend state change")
	require.NotEmpty(t, recs)
	assert.Equal(t, "bad", recs[0]["backend"])
	assert.Equal(t, "healthy", recs[0]["from"])
	assert.Equal(t, "down (ejected)", recs[0]["to"])
	assert.Contains(t, recs[0]["why"], "5 consecutive 5xx")

	for _, sid := range ids { // its sessions move on their next turn
		r := c.chat(sid, []msg{{Role: "user", Content: "again"}})
		assert.Equal(t, http.StatusOK, r.status)
		assert.NotEqual(t, "bad", r.backend)
		assert.False(t, r.hit)
	}
	for i := range 40 { // no new placement on it
		r := c.chat(fmt.Sprintf("after-%d", i), []msg{{Role: "user", Content: "hi"}})
		require.Equal(t, http.StatusOK, r.status)
		assert.NotEqual(t, "bad", r.backend)
	}
	assert.Equal(t, int64(5), hits.Load())

	// Back after base_ejection_seconds (its /health says 200) ...
	assert.Empty(t, c.gw.RecheckPassive(context.Background()), "ejection not over yet")
	c.clock.Advance(30 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State("bad"))
	// ... and ejected again after 5 more 503s, now for 2 x 30 s.
	firstTurnsOn(c, "bad", "again503", 5)
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown())
	c.clock.Advance(30 * time.Second)
	assert.Empty(t, c.gw.RecheckPassive(context.Background()), "second ejection lasts 60 s")
	c.clock.Advance(30 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, 2.0, counter(c.metrics(), gateway.MetricBackendEjections, map[string]string{"backend": "bad"}))
}

// Point 3: ejection is observed health: a drained backend that gets ejected comes back
// drained, not healthy.
func TestEjectionKeepsDrain(t *testing.T) {
	var hits atomic.Int64
	url := always503(t, &hits)
	c := newCluster(t, 1, func(cfg *gateway.Config) {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: "bad", URL: url})
	})
	ids, _ := firstTurnsOn(c, "bad", "drain", 1)
	c.gw.Scheduler().OnBackendDraining("bad")
	for range 4 { // a drained backend keeps its sessions: 4 more 503s make 5
		r := c.chat(ids[0], []msg{{Role: "user", Content: "x"}})
		assert.Equal(t, "bad", r.backend)
		assert.True(t, r.hit)
	}
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown())
	c.clock.Advance(30 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, health.Draining, c.gw.Scheduler().Health().State("bad"), "the operator's drain survives the ejection")

	// And an undrain during an ejection is not reverted when the ejection ends. The other
	// backend goes down, so new sessions land on the drained one (the only eligible).
	c.gw.Scheduler().OnBackendDown("b1")
	for i := range 5 {
		r := c.chat(fmt.Sprintf("drained-only-%d", i), []msg{{Role: "user", Content: "y"}})
		assert.Equal(t, "bad", r.backend)
	}
	c.gw.Scheduler().OnBackendUp("b1")
	require.Equal(t, []string{"bad"}, c.gw.PassivelyDown())
	c.gw.Scheduler().Undrain("bad")
	assert.Equal(t, health.Down, c.gw.Scheduler().Health().State("bad"), "still ejected")
	c.clock.Advance(60 * time.Second)
	assert.Equal(t, []string{"bad"}, c.gw.RecheckPassive(context.Background()))
	assert.Equal(t, health.Healthy, c.gw.Scheduler().Health().State("bad"))
}

// Point 3: with the default consecutive_connect_failures (3) a dead backend's first two
// failures are retried on the session's next choice without breaking its binding; the
// third ejects it and breaks every binding on it at once. max_ejection_percent keeps the
// last of two backends in.
func TestOutlierThreshold(t *testing.T) {
	c := newCluster(t, 3, nil)
	ids, _ := firstTurnsOn(c, "b1", "thr", 4)
	c.killBackend("b1")
	for i, sid := range ids[:3] {
		r := c.chat(sid, []msg{{Role: "user", Content: "turn 2"}})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		assert.NotEqual(t, "b1", r.backend)
		assert.False(t, r.hit)
		if i < 2 {
			bound, ok := c.gw.Scheduler().Lookup(sid, "")
			assert.True(t, ok)
			assert.Equal(t, "b1", bound, "one failure is not an outage: the binding stays")
			assert.Empty(t, c.gw.PassivelyDown())
		}
	}
	require.Equal(t, []string{"b1"}, c.gw.PassivelyDown())
	assert.Equal(t, 4.0, counter(c.metrics(), "agentserve_affinity_broken_total", map[string]string{"reason": "down"}))

	// b2 dies too: with 3 backends and max_ejection_percent 50 only one may be ejected.
	c.killBackend("b2")
	for i := range 30 {
		r := c.chat(fmt.Sprintf("thr2-%d", i), []msg{{Role: "user", Content: "x"}})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	assert.Equal(t, []string{"b1"}, c.gw.PassivelyDown())
	assert.NotEmpty(t, c.logs.records("backend not ejected: max_ejection_percent reached"))
}

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

// Point 5: the in-flight request cap answers 503 with Retry-After.
func TestInflightRequestLimit(t *testing.T) {
	c, entered, unblock := heldCluster(t, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { c.chat(fmt.Sprintf("held-%d", i), []msg{{Role: "user", Content: "x"}}) })
	}
	<-entered
	<-entered
	r := c.chat("third", []msg{{Role: "user", Content: "x"}})
	unblock()
	wg.Wait()
	assert.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.Equal(t, "3", r.header.Get("Retry-After"))
	code, _ := errorCode(t, r.body)
	assert.Equal(t, "overloaded", code)
	assert.Equal(t, 1.0, counter(c.metrics(), gateway.MetricRequests, map[string]string{"code_class": "5xx", "source": "gateway"}))
}

// Point 6: /readyz is 503 when no backend is eligible; /healthz stays 200 (liveness).
func TestReadyz(t *testing.T) {
	c := newCluster(t, 2, nil)
	get := func(path string) (int, map[string]any) {
		resp, err := c.client.Get(c.url + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	status, body := get("/readyz")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "ready", body["status"])
	c.gw.Scheduler().OnBackendDown("b1")
	status, _ = get("/readyz")
	assert.Equal(t, http.StatusOK, status, "one eligible backend is enough")
	c.gw.Scheduler().OnBackendDown("b2")
	status, body = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "not_ready", body["status"])
	assert.Equal(t, map[string]any{"b1": "down", "b2": "down"}, body["backends"])
	status, _ = get("/healthz")
	assert.Equal(t, http.StatusOK, status)

	r := c.chat("s", []msg{{Role: "user", Content: "x"}})
	assert.Equal(t, http.StatusServiceUnavailable, r.status)
	mf := c.metrics()
	assert.Equal(t, 1.0, counter(mf, gateway.MetricRequests, map[string]string{"code_class": "5xx", "source": "gateway"}))
	assert.Equal(t, 0.0, counter(mf, gateway.MetricRequests, map[string]string{"code_class": "2xx"}))
	assert.Equal(t, 0.0, gauge(mf, gateway.MetricBackendUp, map[string]string{"backend": "b1"}))
	assert.Equal(t, 1.0, gauge(mf, gateway.MetricBackendState, map[string]string{"backend": "b2", "state": "down"}))
}

// Point 4: limits.max_connections caps the client connections held at once: with two
// slow clients holding both slots, a third client waits for a slot (until the slow ones
// are cut at read_header_seconds) instead of getting a goroutine and a descriptor.
func TestConnectionCap(t *testing.T) {
	b := startBackend(t, "b1")
	const cut = 500 * time.Millisecond
	g, err := gateway.New(gateway.Config{
		Backends: []gateway.BackendConfig{{ID: "b1", URL: b.url}},
		Timeouts: gateway.TimeoutsConfig{ReadHeaderSeconds: cut.Seconds()},
		Limits:   gateway.LimitsConfig{MaxConnections: 2},
		Health:   gateway.HealthConfig{Enabled: new(false)},
	})
	require.NoError(t, err)
	ln := serveGateway(t, g)

	start := time.Now()
	for range 2 {
		conn, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: gw\r\n") // never finished
		require.NoError(t, err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/healthz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	waited := time.Since(start)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.GreaterOrEqual(t, waited, cut-100*time.Millisecond, "the third connection waited for a slot")
	assert.Less(t, waited, 3*time.Second)
}

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

// serveGateway runs g on a fresh loopback listener until the test ends (g.Serve must
// then return nil) and returns the listener.
func serveGateway(t *testing.T, g *gateway.Gateway) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})
	return ln
}
