package gateway_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// TestClientGoneCancelsBackend: a client that closes its connection while the backend
// is still generating a (non-streamed) answer cancels the backend request, with either
// server: net/http's notices at once, direct's watch within about 75 ms.
func TestClientGoneCancelsBackend(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		started, cancelled := make(chan struct{}), make(chan struct{})
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			close(started)
			<-r.Context().Done() // generating until the gateway gives up the request
			close(cancelled)
		}))
		t.Cleanup(be.Close)
		srv := serveGatewayOn(t, server, gateway.BackendClientDirect, be.URL)
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		body := `{"model":"m","messages":[]}`
		_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Session-ID: s1\r\n"+
			"Content-Type: application/json\r\nContent-Length: 27\r\n\r\n"+body)
		require.NoError(t, err)
		<-started
		require.NoError(t, c.Close())
		select {
		case <-cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("the backend request was not cancelled after the client left")
		}
	})
}

// TestHalfClosedClientGetsNoEmptyOK: a client that half-closes its connection after a
// complete request (shutdown(SHUT_WR), as `nc -N` does) is taken for one that left by
// both servers (net/http's background read and direct's watch see its EOF), and the
// backend request is cancelled; the gateway must then answer nothing at all, not the
// empty "200 OK" a server sends for a handler that returns without writing (tester39).
func TestHalfClosedClientGetsNoEmptyOK(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		started := make(chan struct{})
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			close(started)
			<-r.Context().Done() // generating until the gateway gives up the request
		}))
		t.Cleanup(be.Close)
		srv := serveGatewayOn(t, server, gateway.BackendClientDirect, be.URL)
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		body := `{"model":"m","messages":[]}`
		_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Session-ID: s1\r\n"+
			"Content-Type: application/json\r\nContent-Length: 27\r\n\r\n"+body)
		require.NoError(t, err)
		<-started
		require.NoError(t, c.(*net.TCPConn).CloseWrite())
		got, err := io.ReadAll(c) // until the gateway closes the connection
		require.NoError(t, err, "the gateway did not close the connection")
		require.Empty(t, string(got), "a request the gateway gave up on must get no answer, not an empty 200")
	})
}
