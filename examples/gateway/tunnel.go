package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Protocol upgrades (WebSocket, or any other Upgrade the backend accepts with 101
// Switching Protocols) pass through: the directTransport hands Upgrade requests to its
// net/http.Transport fallback, whose 101 response body is the backend connection itself
// (an io.ReadWriteCloser), and httputil.ReverseProxy joins it to the client's hijacked
// connection. The gateway keeps that body writable at each layer that wraps it
// (tunnelBody): the attempt, which counts the 101 as a success for outlier detection
// when it arrives and applies no stream-idle bound to the tunnel (a tunnel may idle
// legitimately for as long as its ends want), and the lease, released when the tunnel
// closes. A tunnel holds its max_inflight_requests slot and its lease while it is open;
// it ends when either end closes it, or when [Gateway.Serve]'s drain is over. Bytes the
// client sends in the same write as its Upgrade request reach the backend first
// (earlyBytesConn).

// tunnelBody is the body of a 101 response: the upgraded backend connection, readable
// and writable, whose Close runs done once after closing it.
type tunnelBody struct {
	io.ReadWriteCloser
	done func()
	once sync.Once
}

// Close closes the connection and runs done (once).
func (t *tunnelBody) Close() error {
	err := t.ReadWriteCloser.Close()
	t.once.Do(t.done)
	return err
}

// tunnel ends the attempt of a 101 response whose body is writable: the timer
// stops (no stream-idle bound), the attempt counts as a success, and the body cancels
// the attempt's context when the tunnel closes. False when the body is not writable:
// the ReverseProxy answers 502 then, as for any backend that cannot switch.
func (at *attemptTimer) tunnel(resp *http.Response, cancel context.CancelCauseFunc) bool {
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		return false
	}
	at.stop()
	at.succeed()
	resp.Body = &tunnelBody{ReadWriteCloser: rwc, done: func() { cancel(nil) }}
	return true
}

// leaseTunnel makes the lease of st end when the tunnel of a 101 response closes;
// false when resp is not such a response.
func leaseTunnel(st *route, resp *http.Response) bool {
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		return false
	}
	resp.Body = &tunnelBody{ReadWriteCloser: rwc, done: func() { st.release(usage{}, nil) }}
	return true
}

// Hijack hands the client connection over (httputil.ReverseProxy does for a 101) and
// records the 101 as the request's status (code_class 1xx).
func (w *outcomeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	if w.code == 0 {
		w.code = http.StatusSwitchingProtocols
	}
	// A tunnel is not bounded by timeouts.client_write_seconds: its writes may wait as
	// long as the protocol it carries lets them. Clear the request's deadline.
	if err := c.SetWriteDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, nil, err
	}
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the client sent right after its Upgrade request, read by the server
		// with it: httputil.ReverseProxy copies from the connection, not from brw, so
		// they are handed over first (tester40).
		c = &earlyBytesConn{Conn: c, r: io.MultiReader(io.LimitReader(brw.Reader, int64(n)), c)}
	}
	return c, brw, nil
}

// earlyBytesConn is a hijacked client connection whose reads return first the bytes the
// server had already buffered past the request, then the connection's.
type earlyBytesConn struct {
	net.Conn
	r io.Reader
}

func (c *earlyBytesConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the connection when it can (httputil.ReverseProxy passes a
// client's end of stream on to the backend with it).
func (c *earlyBytesConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
