package gateway

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"time"
)

// Bounds of the directTransport's response-header phase.
const (
	// maxResponseHeaderBytes caps the bytes read for a response's headers (status line
	// and header fields, plus any body bytes read ahead in the same buffer fill): 10 MiB,
	// net/http.Transport's default (its MaxResponseHeaderBytes), so both backend clients
	// answer an oversized header block with 502. Without a Got1xxResponse hook the budget
	// covers the 1xx responses and the final one together; with one it restarts at each
	// forwarded 1xx, as net/http.Transport does.
	maxResponseHeaderBytes = 10 << 20
	// max1xxResponses caps the informational responses read for one request; more is an
	// error (502). net/http.Transport bounds them by the header budget only (and leaves
	// forwarded ones to the hook's owner; httputil.ReverseProxy sets no bound), so this
	// is the gateway's own bound.
	max1xxResponses = 100
	// earlyResponseWait bounds the wait for a response after writing the request failed
	// (a backend that answered early, e.g. 401 to a large body, and closed): the
	// response normally sits in the socket's receive buffer already. 50 ms, the wait
	// net/http.Transport allows a request write to finish after a response
	// (maxWriteWaitBeforeConnReuse).
	earlyResponseWait = 50 * time.Millisecond
)

// errHeaderBudget is returned by a readBudget whose budget is spent.
var errHeaderBudget = fmt.Errorf("backend response headers exceeded %d bytes; aborted", maxResponseHeaderBytes)

// readBudget is a connection's read side with a byte budget (net/http.Transport's
// persistConn.readLimit): spent, Read returns errHeaderBudget.
type readBudget struct {
	net.Conn
	left int64
}

// Read reads at most the budget left.
func (r *readBudget) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, errHeaderBudget
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.Conn.Read(p)
	r.left -= int64(n)
	return n, err
}

// connWriter is a connection's write side that keeps the last write error, which
// tells a failed write to the backend from a failed read of the request body (net/http's
// Request.Write reports both alike).
type connWriter struct {
	net.Conn
	err error
}

// Write writes p to the connection.
func (w *connWriter) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// readEarly reads a response on c after writing req failed, waiting at most
// earlyResponseWait; any error (none arrived) means the write error stands.
func (t *directTransport) readEarly(ctx context.Context, c *hopConn, req *http.Request, trace *httptrace.ClientTrace, a *attemptInfo) (*http.Response, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(earlyResponseWait)); err != nil {
		return nil, err
	}
	resp, err := readResponse(c, req, trace, a)
	if err != nil {
		return nil, err
	}
	if err := c.Conn.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return resp, nil
}

// readResponse reads the response to req on c, recording in a (when not nil) and
// telling the trace's GotFirstResponseByte when its first byte arrives: informational
// responses go to the trace's Got1xxResponse (if any), the header phase is capped at
// maxResponseHeaderBytes. Errors: the read's (I/O), the hook's, or one wrapping
// ErrBadResponse: a parse error, errHeaderBudget, a status outside 100-599, too many 1xx
// responses, or a 101 to a
// request that asked for no upgrade (the directTransport hands Upgrade requests to its
// fallback, so every 101 it reads is unsolicited; reusing its connection afterwards
// would read the switched protocol as HTTP).
func readResponse(c *hopConn, req *http.Request, trace *httptrace.ClientTrace, a *attemptInfo) (*http.Response, error) {
	c.in.left = maxResponseHeaderBytes
	defer func() { c.in.left = math.MaxInt64 }() // bodies are not capped
	if _, err := c.br.Peek(1); err != nil {
		return nil, badResponse(err) // nothing arrived: a stale keep-alive connection if reused
	}
	if a != nil {
		a.responded.Store(true) // from here on a failure is not the keep-alive race
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	for n1xx := 0; ; {
		resp := fastResponse(c.br, req)
		var err error
		if resp == nil {
			resp, err = http.ReadResponse(c.br, req)
		}
		if err != nil {
			if c.in.left <= 0 {
				return nil, badResponse(errHeaderBudget)
			}
			return nil, badResponse(err)
		}
		if err := badStatus(resp.StatusCode); err != nil { // a 099 is no 1xx, a 999 no final answer
			return nil, err // the caller closes c (its body is not read)
		}
		if resp.StatusCode >= 200 {
			return resp, nil
		}
		if err := badUpgrade(req, resp); err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if n1xx++; n1xx > max1xxResponses {
			return nil, fmt.Errorf("%w: backend sent more than %d informational (1xx) responses", ErrBadResponse, max1xxResponses)
		}
		if trace == nil || trace.Got1xxResponse == nil {
			continue // skipped; the budget covers them and the final response together
		}
		if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
			return nil, err
		}
		c.in.left = maxResponseHeaderBytes
	}
}
