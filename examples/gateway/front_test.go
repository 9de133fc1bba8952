package gateway_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// servers are the values of Config.Server the connection-level tests run over, each
// as a subtest "server=<name>".
var servers = []string{gateway.ServerNetHTTP, gateway.ServerDirect}

// eachServer runs fn once per server, as subtests.
func eachServer(t *testing.T, fn func(t *testing.T, server string)) {
	t.Helper()
	for _, server := range servers {
		t.Run("server="+server, func(t *testing.T) { fn(t, server) })
	}
}

// front is the server in front of a gateway in a test: an httptest.Server (nethttp) or
// an h1.Server (direct), on a loopback listener.
type front struct {
	URL      string
	Listener net.Listener
	client   *http.Client
	close    func()
	once     sync.Once
}

// Client is an HTTP client for the front (its idle connections closed by Close).
func (f *front) Client() *http.Client { return f.client }

// Close closes the listener and every connection, and waits for the handlers.
// Idempotent.
func (f *front) Close() { f.once.Do(f.close) }

// newFront serves h with server (gateway.ServerNetHTTP or ServerDirect), with the
// bounds of bounds when not nil (a [gateway.Gateway.HTTPServer]; nethttp: that server
// itself, direct: an h1.Server with its timeouts and limits). Closed at the test's end.
func newFront(t *testing.T, server string, h http.Handler, bounds *http.Server) *front {
	t.Helper()
	if server != gateway.ServerDirect {
		ts := httptest.NewUnstartedServer(h)
		if bounds != nil {
			bounds.Handler = h
			ts.Config = bounds
		}
		ts.Start()
		t.Cleanup(ts.Close)
		return &front{URL: ts.URL, Listener: ts.Listener, client: ts.Client(), close: ts.Close}
	}
	s := &h1.Server{Handler: h}
	if bounds != nil {
		s.ReadHeaderTimeout, s.IdleTimeout, s.MaxHeaderBytes, s.ErrorLog =
			bounds.ReadHeaderTimeout, bounds.IdleTimeout, bounds.MaxHeaderBytes, bounds.ErrorLog
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	f := &front{URL: "http://" + ln.Addr().String(), Listener: ln, client: &http.Client{Transport: tr}}
	f.close = func() {
		_ = s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("h1 Serve: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil { // returns once every connection is done
			t.Errorf("h1 Shutdown after Close: %v", err)
		}
		tr.CloseIdleConnections()
	}
	t.Cleanup(f.Close)
	return f
}
