package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

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
