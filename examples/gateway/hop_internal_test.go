package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hopServer is a backend counting the connections it accepted.
func hopServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func newTestDirect(t *testing.T) *directTransport {
	t.Helper()
	tr := newDirectTransport(TimeoutsConfig{}.withDefaults())
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// hopPost sends a POST through tr and returns the body read to the end, and whether
// httptrace saw a reused connection and a written request.
func hopPost(t *testing.T, tr http.RoundTripper, url, body string) (string, bool, bool) {
	t.Helper()
	got, conn, wrote := hopPostConn(t, tr, url, body)
	return got, conn.Reused, wrote
}

// hopPostConn is hopPost returning what httptrace's GotConn saw.
func hopPostConn(t *testing.T, tr http.RoundTripper, url, body string) (string, httptrace.GotConnInfo, bool) {
	t.Helper()
	var conn httptrace.GotConnInfo
	var wrote bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn:      func(i httptrace.GotConnInfo) { conn = i },
		WroteRequest: func(w httptrace.WroteRequestInfo) { wrote = w.Err == nil },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return string(got), conn, wrote
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func TestDirectTransportKeepAlive(t *testing.T) {
	srv, conns := hopServer(t, echo)
	tr := newTestDirect(t)
	for i := range 5 {
		got, reused, wrote := hopPost(t, tr, srv.URL+"/v1/chat/completions", `{"n":1}`)
		assert.Equal(t, `{"n":1}`, got)
		assert.Equal(t, i > 0, reused, "request %d", i)
		assert.True(t, wrote)
	}
	assert.EqualValues(t, 1, conns.Load(), "one keep-alive connection for sequential requests")
}

func TestDirectTransportChunkedAndEarlyClose(t *testing.T) {
	release := make(chan struct{})
	srv, conns := hopServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/stream" {
			select { // a stream that goes on until the client leaves
			case <-r.Context().Done():
			case <-release:
			}
		}
	})
	tr := newTestDirect(t)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/stream", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf) // the first event arrives before the stream ends
	require.NoError(t, err)
	assert.Contains(t, string(buf[:n]), "data: 1")
	require.NoError(t, resp.Body.Close()) // closed mid-stream: the connection is dropped
	close(release)
	got, reused, _ := hopPost(t, tr, srv.URL+"/short", "")
	assert.Equal(t, "data: 1\n\n", got)
	assert.False(t, reused, "a half-read connection is never reused")
	assert.EqualValues(t, 2, conns.Load())
}

func TestDirectTransportCancelClosesConnection(t *testing.T) {
	arrived, gone := make(chan struct{}), make(chan struct{})
	srv, _ := hopServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http notices a closed connection once the body is read
		close(arrived)
		<-r.Context().Done() // the backend sees the client leave (vLLM aborts the generation)
		close(gone)
	})
	tr := newTestDirect(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	go func() { <-arrived; cancel(ErrBackendTimeout) }()
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, ErrBackendTimeout, "the context's cause is returned")
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend connection was not closed on cancel")
	}
}

func TestDirectTransportDropsClosedIdleConnections(t *testing.T) {
	srv, conns := hopServer(t, echo)
	tr := newTestDirect(t)
	_, _, _ = hopPost(t, tr, srv.URL, "a")
	tr.mu.Lock()
	idle := tr.pools[srv.Listener.Addr().String()].idle
	require.Len(t, idle, 1)
	c := idle[0]
	tr.mu.Unlock()
	require.True(t, alive(c.Conn))
	srv.CloseClientConnections() // the backend closes its idle keep-alive connection
	require.Eventually(t, func() bool { return !alive(c.Conn) }, 10*time.Second, time.Millisecond)
	got, reused, _ := hopPost(t, tr, srv.URL, "b") // a POST: not replayable, must not hit the dead one
	assert.Equal(t, "b", got)
	assert.False(t, reused)
	assert.EqualValues(t, 2, conns.Load())

	// An idle connection past backend_idle_conn_seconds is not reused either.
	tr.mu.Lock()
	tr.pools[srv.Listener.Addr().String()].idle[0].idleSince = time.Now().Add(-time.Hour)
	tr.mu.Unlock()
	_, reused, _ = hopPost(t, tr, srv.URL, "c")
	assert.False(t, reused)
	assert.EqualValues(t, 3, conns.Load())
}

func TestDirectTransportDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	tr := newTestDirect(t)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr, strings.NewReader("{}"))
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.Error(t, err)
	assert.True(t, IsConnectError(err), "%v", err)
}

func TestBackendClientConfig(t *testing.T) {
	base := Config{Backends: []BackendConfig{{ID: "a", URL: "http://127.0.0.1:1"}}}
	for _, tc := range []struct {
		name   string
		direct bool
		ok     bool
	}{{"", true, true}, {"direct", true, true}, {"nethttp", false, true}, {"NetHTTP", false, true}, {"fast", false, false}} {
		cfg := base
		cfg.BackendClient = tc.name
		g, err := New(cfg)
		if !tc.ok {
			assert.ErrorIs(t, err, ErrBackendClient, tc.name)
			assert.ErrorIs(t, err, ErrInvalidConfig, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		_, isDirect := g.ownedBase.(*directTransport)
		assert.Equal(t, tc.direct, isDirect, tc.name)
		next := cfg
		next.BackendClient = map[bool]string{true: "nethttp", false: "direct"}[tc.direct]
		err = g.Reload(next)
		assert.ErrorIs(t, err, ErrReloadNeedsRestart, tc.name)
		if tc.name == "" { // an omitted key shows its default (tester35: `"" -> "nethttp"`)
			assert.ErrorContains(t, err, `backend_client "direct" -> "nethttp"`)
		}
		g.Close()
	}
}

// The response headers are assigned to the header map directly (no canonicalization per
// response), which is right only for keys already in canonical form.
func TestResponseHeaderKeysCanonical(t *testing.T) {
	for _, k := range []string{HeaderBackend, HeaderAffinityHit, HeaderOutcome, "Content-Length"} {
		assert.Equal(t, http.CanonicalHeaderKey(k), k)
	}
}

// TestBackendConnectionsRawIO: on Linux both backend clients dial connections wrapped by
// internal/rawio (raw system calls), and requests work over them.
func TestBackendConnectionsRawIO(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rawio wraps connections on Linux only")
	}
	srv, _ := hopServer(t, echo)
	nethttp := newTransport(TimeoutsConfig{}.withDefaults())
	t.Cleanup(nethttp.CloseIdleConnections)
	for name, tr := range map[string]http.RoundTripper{"direct": newTestDirect(t), "nethttp": nethttp} {
		t.Run(name, func(t *testing.T) {
			got, info, _ := hopPostConn(t, tr, srv.URL+"/v1/chat/completions", `{"n":2}`)
			assert.Equal(t, `{"n":2}`, got)
			conn := info.Conn
			require.NotNil(t, conn)
			_, plain := conn.(*net.TCPConn)
			assert.False(t, plain, "a %T, not a raw-I/O connection", conn)
		})
	}
}
