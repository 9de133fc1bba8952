package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// admin_listen is "" (off) or host:port with port 0..65535, and not the address
// `listen` binds; a bad one is ErrAdminListen naming the key, at load.
func TestAdminListenConfig(t *testing.T) {
	tests := []struct {
		name, listen, admin string
		want                error // nil: accepted
	}{
		{"off", "127.0.0.1:8080", "", nil},
		{"loopback port", "127.0.0.1:8080", "127.0.0.1:9901", nil},
		{"all interfaces", "127.0.0.1:8080", ":9901", nil},
		{"port 0 beside port 0", "127.0.0.1:0", "127.0.0.1:0", nil},
		{"same port, other host", "127.0.0.1:8080", "127.0.0.2:8080", nil},
		{"IPv6", "127.0.0.1:8080", "[::1]:9901", nil},
		{"no port", "127.0.0.1:8080", "localhost", gateway.ErrAdminListen},
		{"port over 65535", "127.0.0.1:8080", "127.0.0.1:99999", gateway.ErrAdminListen},
		{"port not a number", "127.0.0.1:8080", "127.0.0.1:http", gateway.ErrAdminListen},
		{"negative port", "127.0.0.1:8080", "127.0.0.1:-1", gateway.ErrAdminListen},
		{"the listen address", "127.0.0.1:8080", "127.0.0.1:8080", gateway.ErrAdminListen},
		{"listen's port, leading zero", "127.0.0.1:8080", "127.0.0.1:08080", gateway.ErrAdminListen},
		{"listen's port on all interfaces", "127.0.0.1:8080", ":8080", gateway.ErrAdminListen},
		{"listen on all interfaces", "0.0.0.0:8080", "127.0.0.1:8080", gateway.ErrAdminListen},
		{"listen on all IPv6 interfaces", "[::]:8080", "127.0.0.1:8080", gateway.ErrAdminListen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := gateway.ParseConfig(fmt.Appendf(nil, "listen: %q\nadmin_listen: %q\n%s", tt.listen, tt.admin, minimal))
			if tt.want == nil {
				require.NoError(t, err)
				assert.Equal(t, tt.admin, cfg.AdminListen)
				return
			}
			require.ErrorIs(t, err, tt.want)
			require.ErrorIs(t, err, gateway.ErrInvalidConfig)
			assert.Contains(t, err.Error(), "admin_listen")
			assert.Contains(t, err.Error(), tt.admin)
		})
	}
}

// A reload cannot turn the admin listener on or off or move it.
func TestAdminListenReloadNeedsRestart(t *testing.T) {
	urls := jsonBackends(t, 1)
	for _, tc := range []struct{ from, to string }{{"", "127.0.0.1:0"}, {"127.0.0.1:0", ""}, {"127.0.0.1:0", "127.0.0.1:9901"}} {
		t.Run(tc.from+" -> "+tc.to, func(t *testing.T) {
			cfg := yamlConfig(t, urls, []string{"b0"}, []float64{1}, fmt.Sprintf("admin_listen: %q\n", tc.from))
			g, err := gateway.New(cfg)
			require.NoError(t, err)
			t.Cleanup(g.Close)
			next := cfg
			next.AdminListen = tc.to
			err = g.Reload(next)
			require.ErrorIs(t, err, gateway.ErrReloadNeedsRestart)
			assert.Contains(t, err.Error(), "admin_listen")
			assert.Equal(t, tc.from, g.Config().AdminListen)
		})
	}
}

// The finding (tester32, 4): with every limits.max_connections slot held by a slow
// upload (headers sent, body trickled, each holding its slot for read_body_seconds),
// /healthz on the main listener gets no answer, so a liveness probe there would get a
// healthy gateway restarted. On admin_listen /healthz, /readyz and /metrics still
// answer; during the drain it says healthy but not ready, and Serve closes it on the way
// out with no goroutine left.
func TestAdminListenSurvivesSaturatedMain(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // first registered: runs last
	urls := jsonBackends(t, 1)
	g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1},
		"health: {enabled: false}\nadmin_listen: 127.0.0.1:0\ndrain_seconds: 3600\nlimits: {max_connections: 2}\n"))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	require.Eventually(t, func() bool { return g.AdminAddr() != nil }, 10*time.Second, time.Millisecond)
	admin := "http://" + g.AdminAddr().String()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(path string) (int, map[string]any) {
		t.Helper()
		resp, err := client.Get(admin + path)
		require.NoError(t, err, path)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var v map[string]any
		if path != "/metrics" {
			require.NoError(t, json.Unmarshal(body, &v), string(body))
		} else {
			assert.Contains(t, string(body), gateway.MetricRequests)
		}
		return resp.StatusCode, v
	}

	// Two slow uploads take both connection slots (accepted in the order they connected).
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		require.NoError(t, err)
	}
	// The main listener is saturated: its /healthz waits in the backlog.
	probe, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	_, err = io.WriteString(probe, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, probe.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = probe.Read(make([]byte, 1))
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "the main listener answered /healthz (err %v): it was not saturated", err)

	// The admin listener answers.
	code, body := get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok", body["status"])
	code, body = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ready", body["status"])
	assert.Equal(t, map[string]any{"b0": "healthy"}, body["backends"])
	code, _ = get("/metrics")
	assert.Equal(t, http.StatusOK, code)
	code, body = get("/v1/models") // the admin listener proxies nothing
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not_found", body["error"].(map[string]any)["code"])

	// The drain (the uploads still hold it, drain_seconds an hour): alive, not ready.
	cancel()
	require.Eventually(t, func() bool {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable && body["status"] == "draining"
	}, 10*time.Second, time.Millisecond)
	code, body = get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok", body["status"])
	select {
	case err := <-done:
		t.Fatalf("Serve returned during the drain: %v", err)
	default:
	}

	g.EndDrain()
	awaitServe(t, done)
	tr.CloseIdleConnections()
	_, err = net.Dial("tcp", g.AdminAddr().String())
	require.Error(t, err, "the admin listener is closed once Serve returns")
	require.True(t, strings.Contains(err.Error(), "refused"), "dial: %v", err)
}

// An admin_listen address that cannot be bound fails Serve at once, before it serves
// or loads anything; the main listener it was given is closed.
func TestAdminListenBindFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	urls := jsonBackends(t, 1)
	g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1},
		fmt.Sprintf("health: {enabled: false}\nadmin_listen: %q\n", taken.Addr().String())))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = g.Serve(context.Background(), ln)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "admin_listen")
	assert.Nil(t, g.AdminAddr())
	_, err = ln.Accept()
	assert.ErrorIs(t, err, net.ErrClosed, "Serve closed the main listener")
}
