package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Graceful restart: Serve drains in-flight requests and saves the bindings; the next
// gateway's Serve loads them, so every session returns to its backend as a hit.
func TestServeSavesBindingsAndNextStartLoadsThem(t *testing.T) {
	release := make(chan struct{})
	var inflight atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			inflight.Add(1)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(slow.Close)
	urls := append(jsonBackends(t, 2), slow.URL)
	ids := []string{"b0", "b1", "b2"}
	snap := filepath.Join(t.TempDir(), "bindings.snap")
	cfg := yamlConfig(t, urls, ids, []float64{1, 1, 1}, "binding_snapshot: "+snap+"\ndrain_seconds: 30\n")

	serve := func(g *gateway.Gateway) (string, context.CancelFunc, chan error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Serve(ctx, ln) }()
		return "http://" + ln.Addr().String(), cancel, done
	}
	post := func(base, session string, slowReq bool) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("X-Session-ID", session)
		if slowReq {
			req.Header.Set("X-Slow", "1")
		}
		return http.DefaultClient.Do(req)
	}

	g1, err := gateway.New(cfg)
	require.NoError(t, err)
	base, cancel, done := serve(g1)
	want := map[string]string{}
	slowSession := ""
	for i := range 40 {
		s := fmt.Sprintf("s%d", i)
		resp, err := post(base, s, false)
		require.NoError(t, err)
		resp.Body.Close()
		want[s] = resp.Header.Get(gateway.HeaderBackend)
		if want[s] == "b2" && slowSession == "" {
			slowSession = s
		}
	}
	require.NotEmpty(t, slowSession)
	// An in-flight request when the shutdown starts finishes with 200.
	slowDone := make(chan int, 1)
	go func() {
		resp, err := post(base, slowSession, true)
		if err != nil {
			slowDone <- 0
			return
		}
		resp.Body.Close()
		slowDone <- resp.StatusCode
	}()
	for inflight.Load() == 0 {
		runtime.Gosched()
	}
	cancel()
	// Serve is draining: it has not returned while the request is in flight.
	select {
	case err := <-done:
		t.Fatalf("Serve returned while a request was in flight: %v", err)
	default:
	}
	close(release)
	require.Equal(t, http.StatusOK, <-slowDone)
	require.NoError(t, <-done)
	_, err = os.Stat(snap)
	require.NoError(t, err, "the snapshot was saved")

	g2, err := gateway.New(cfg)
	require.NoError(t, err)
	base, cancel, done = serve(g2)
	t.Cleanup(func() { cancel(); <-done })
	for s, id := range want {
		resp, err := post(base, s, false)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, id, resp.Header.Get(gateway.HeaderBackend), s)
		assert.Equal(t, "true", resp.Header.Get(gateway.HeaderAffinityHit), "session %s is a hit after the restart", s)
	}
}

// A damaged snapshot is reported and nothing is loaded; a missing one is not an error.
func TestLoadBindingsErrors(t *testing.T) {
	urls := jsonBackends(t, 1)
	g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, ""))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	dir := t.TempDir()
	n, err := g.LoadBindings(filepath.Join(dir, "missing"))
	require.NoError(t, err)
	assert.Equal(t, -1, n)

	require.Equal(t, http.StatusOK, send(t, g, "s1").Code)
	path := filepath.Join(dir, "b.snap")
	n, err = g.SaveBindings(path)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)-3], 0o600))

	g2, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, ""))
	require.NoError(t, err)
	t.Cleanup(g2.Close)
	_, err = g2.LoadBindings(path)
	require.ErrorIs(t, err, affinity.ErrCorruptSnapshot)
	assert.Zero(t, g2.Scheduler().Len())
}

func TestDrainSecondsConfig(t *testing.T) {
	base := "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n"
	cfg, err := gateway.ParseConfig([]byte(base))
	require.NoError(t, err)
	assert.Equal(t, gateway.DefaultDrainSeconds, cfg.DrainSeconds)
	for _, bad := range []string{"-1", ".nan", ".inf"} {
		_, err := gateway.ParseConfig([]byte(base + "drain_seconds: " + bad + "\n"))
		assert.ErrorIs(t, err, gateway.ErrDrainTimeout, bad)
	}
}

// The drain is bounded: a request still waiting for its backend after drain_seconds is
// answered a 503 "shutdown" (drain_pending_test.go has the details) and Serve returns.
func TestServeDrainIsBounded(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-release
		}))
		t.Cleanup(stuck.Close)
		t.Cleanup(func() { close(release) })
		// No health checks: started is the client's request, not a probe's.
		g, err := gateway.New(yamlConfig(t, []string{stuck.URL}, []string{"b0"}, []float64{1}, "server: "+server+"\ndrain_seconds: 0.05\nhealth: {enabled: false}\n"))
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Serve(ctx, ln) }()
		type answer struct {
			status int
			err    error
		}
		got := make(chan answer, 1)
		go func() {
			resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				got <- answer{err: err}
				return
			}
			resp.Body.Close()
			got <- answer{status: resp.StatusCode}
		}()
		<-started
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after drain_seconds")
		}
		a := <-got
		require.NoError(t, a.err, "the request still waiting after the drain is answered")
		assert.Equal(t, http.StatusServiceUnavailable, a.status)
	})
}
