package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/rawio"
)

// Values of [TimeoutsConfig]'s sibling key backend_client (Config.BackendClient).
const (
	// BackendClientDirect is the gateway's own keep-alive pool for plain-HTTP backends:
	// each request is written (net/http's Request.Write) and its response read
	// (http.ReadResponse) on the calling goroutine. The default.
	BackendClientDirect = "direct"
	// BackendClientNetHTTP is a clone of http.DefaultTransport.
	BackendClientNetHTTP = "nethttp"
)

// idleTransport is a RoundTripper whose idle connections can be closed.
type idleTransport interface {
	http.RoundTripper
	CloseIdleConnections()
}

// directTransport is an HTTP/1.1 client for plain-http backends without per-connection
// goroutines: net/http.Transport runs a read and a write goroutine per connection and
// hands every request and response between them and the caller, which on a
// small-request proxy costs more CPU than the parsing. Here the caller's goroutine
// writes the request (http.Request.Write into a buffered writer: one write system call;
// writeRequestFast for a plain request, writing what it would) and parses the response
// (http.ReadResponse, the parser net/http.Transport uses; fastResponse for a plain
// Content-Length response, reading it field for field as it would), so the wire format
// and header handling are net/http's own. It keeps the semantics the
// gateway relies on: the request context cancels dials, writes and reads (the
// connection is closed), httptrace's GotConn (Reused) and WroteRequest are reported,
// 1xx informational responses go to httptrace's Got1xxResponse when set (that is how
// httputil.ReverseProxy forwards 103 Early Hints) and are skipped otherwise (at most
// max1xxResponses either way), response headers are capped at maxResponseHeaderBytes, a
// response that arrives although writing the request failed (an early 401 to a large
// body) is returned, as net/http.Transport returns it, and a connection returns to the idle pool
// only once its response body was read to the end. An idle connection is checked
// before reuse with a non-blocking peek (one system call), so a connection the backend
// closed while idle is dropped rather than written to — the check net/http.Transport's
// per-connection read goroutine does. HTTPS backends and protocol upgrades go through
// the fallback (a net/http.Transport). An Expect header is written as is, without
// waiting for a 100 (the gateway removes Expect in rewrite: it has the whole body).
// Safe for concurrent use.
type directTransport struct {
	dialer      net.Dialer
	idleTimeout time.Duration
	maxIdle     int // per backend address
	fallback    *http.Transport

	mu     sync.Mutex
	pools  map[string]*connPool
	closed bool // CloseIdleConnections was called: no idle connection is kept from then on... until the next request
}

// connPool is the idle connections to one backend address, most recently used last.
type connPool struct {
	idle  []*hopConn
	timer *time.Timer // closes expired idle connections; nil when not armed
}

// hopConn is one connection to a backend with its buffers.
type hopConn struct {
	net.Conn
	in        readBudget // br's source: the connection with a header-phase budget
	out       connWriter // bw's destination: the connection, remembering a write error
	br        *bufio.Reader
	bw        *bufio.Writer
	addr      string
	idleSince time.Time
	peek      peeker // alive check before reuse
	closeFn   func() // closes the connection: the context.AfterFunc of each request on it, made once
}

func newDirectTransport(t TimeoutsConfig) *directTransport {
	return &directTransport{
		dialer:      net.Dialer{Timeout: duration(t.DialSeconds), KeepAlive: 30 * time.Second},
		idleTimeout: duration(t.BackendIdleConnSeconds),
		maxIdle:     256,
		fallback:    newTransport(t),
		pools:       map[string]*connPool{},
	}
}

// RoundTrip sends req on an idle or new connection and returns its response; the
// response body gives the connection back when read to io.EOF, and closes it when
// closed earlier. Errors: the dial's (*net.OpError), the write's or the read's, or the
// context's cause when req's context ended first.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req.Context(), req, nil)
}

// roundTrip is RoundTrip under ctx instead of req's context, that also records in a
// (when not nil) what an attempt's httptrace hooks would: whether the connection was
// reused and whether the whole request was written. The gateway's attempt calls it
// directly, which saves composing a ClientTrace into the request context and a copy of
// the request to carry the attempt's context (an allocation each per attempt); the
// response's Request is req. ctx must be req's context or one derived from it (its
// values are req's): with a nil a, it must be req's.
func (t *directTransport) roundTrip(ctx context.Context, req *http.Request, a *attemptInfo) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Header.Get("Upgrade") != "" {
		if a != nil {
			req = req.WithContext(a.traced(ctx))
		}
		return t.fallback.RoundTrip(req)
	}
	trace := httptrace.ContextClientTrace(ctx)
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	c, reused := t.get(addr)
	if c == nil {
		nc, err := t.dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			closeBody(req)
			return nil, ctxErr(ctx, err)
		}
		nc = rawio.Wrap(nc)
		c = &hopConn{Conn: nc, in: readBudget{Conn: nc, left: math.MaxInt64}, out: connWriter{Conn: nc}, addr: addr,
			closeFn: func() { _ = nc.Close() }}
		c.peek.init(nc)
		c.br = bufio.NewReaderSize(&c.in, 16<<10)
		c.bw = bufio.NewWriterSize(&c.out, 16<<10)
	}
	if a != nil {
		a.reused.Store(reused)
	}
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: c.Conn, Reused: reused})
	}
	stop := context.AfterFunc(ctx, c.closeFn)
	c.out.err = nil
	fast, err := writeRequestFast(c.bw, req) // closes req.Body
	if !fast {
		err = req.Write(c.bw) // closes req.Body
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if a != nil && err == nil {
		a.wrote.Store(true)
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if c.out.err != nil { // err is the connection's, not the request body's
		// The backend may have answered before reading the whole body (401, 413) and
		// closed: its response is in the receive buffer. Forward it, never reuse c.
		// (Not for a request-body read error: the backend is still waiting then.)
		resp, rerr := t.readEarly(ctx, c, req, trace, a)
		if rerr != nil {
			stop()
			_ = c.Conn.Close()
			return nil, ctxErr(ctx, err)
		}
		return t.wrap(c, stop, false, resp, a), nil
	}
	if err != nil {
		stop()
		_ = c.Conn.Close()
		return nil, ctxErr(ctx, err)
	}
	resp, err := readResponse(c, req, trace, a)
	if err != nil {
		stop()
		_ = c.Conn.Close()
		return nil, ctxErr(ctx, err)
	}
	return t.wrap(c, stop, !req.Close, resp, a), nil
}

// wrap gives resp a body that releases c when read to the end (back to the pool when
// reusable and resp allows it, closed otherwise). The body is a's hop when a is set
// (an attempt's, used once: a body that outlives its response cannot reach the next one
// on c), a new one otherwise.
func (t *directTransport) wrap(c *hopConn, stop func() bool, reusable bool, resp *http.Response, a *attemptInfo) *http.Response {
	keep := reusable && !resp.Close
	if resp.Body == http.NoBody {
		t.release(c, stop, keep)
		return resp
	}
	var hb *hopBody
	if a != nil {
		hb = &a.hop
	} else {
		hb = new(hopBody)
	}
	hb.rc, hb.t, hb.c, hb.stop, hb.keep = resp.Body, t, c, stop, keep
	resp.Body = hb
	return resp
}

// ctxErr returns the cause of ctx when it is done (the connection was closed because
// of it), err otherwise.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// get pops the most recently used idle connection to addr that is not expired and not
// closed by the backend; nil if none.
func (t *directTransport) get(addr string) (*hopConn, bool) {
	now := time.Now()
	for {
		t.mu.Lock()
		p := t.pools[addr]
		if p == nil || len(p.idle) == 0 {
			t.mu.Unlock()
			return nil, false
		}
		c := p.idle[len(p.idle)-1]
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		t.mu.Unlock()
		if now.Sub(c.idleSince) < t.idleTimeout && c.peek.alive() {
			return c, true
		}
		_ = c.Conn.Close()
	}
}

// release gives c back to the idle pool when keep is set, the request context did not
// close it (stop succeeds) and no byte is left unread; it closes c otherwise.
func (t *directTransport) release(c *hopConn, stop func() bool, keep bool) {
	if !stop() || !keep || c.br.Buffered() > 0 {
		_ = c.Conn.Close()
		return
	}
	c.idleSince = time.Now()
	t.mu.Lock()
	p := t.pools[c.addr]
	if p == nil {
		p = &connPool{}
		t.pools[c.addr] = p
	}
	if len(p.idle) >= t.maxIdle {
		t.mu.Unlock()
		_ = c.Conn.Close()
		return
	}
	p.idle = append(p.idle, c)
	if p.timer == nil {
		addr := c.addr
		p.timer = time.AfterFunc(t.idleTimeout, func() { t.expire(addr) })
	}
	t.mu.Unlock()
}

// expire closes the idle connections to addr that have been idle for idleTimeout and
// re-arms the timer for the oldest remaining one.
func (t *directTransport) expire(addr string) {
	now := time.Now()
	var old []*hopConn
	t.mu.Lock()
	p := t.pools[addr]
	if p == nil {
		t.mu.Unlock()
		return
	}
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].idleSince) >= t.idleTimeout {
		n++
	}
	old = append(old, p.idle[:n]...)
	p.idle = append(p.idle[:0], p.idle[n:]...)
	clear(p.idle[len(p.idle):cap(p.idle)])
	if len(p.idle) > 0 {
		p.timer = time.AfterFunc(t.idleTimeout-now.Sub(p.idle[0].idleSince), func() { t.expire(addr) })
	} else {
		p.timer = nil
	}
	t.mu.Unlock()
	for _, c := range old {
		_ = c.Conn.Close()
	}
}

// CloseIdleConnections closes every idle connection (and the fallback's).
func (t *directTransport) CloseIdleConnections() {
	var all []*hopConn
	t.mu.Lock()
	for addr, p := range t.pools {
		all = append(all, p.idle...)
		if p.timer != nil {
			p.timer.Stop()
		}
		delete(t.pools, addr)
	}
	t.mu.Unlock()
	for _, c := range all {
		_ = c.Conn.Close()
	}
	t.fallback.CloseIdleConnections()
}

// hopBody is a response body on a directTransport connection: at io.EOF the connection
// goes back to the pool; closed before that, the connection is closed (the rest of the
// body is not drained: a stream could last minutes).
type hopBody struct {
	rc   io.ReadCloser
	t    *directTransport
	c    *hopConn
	stop func() bool
	keep bool
	mu   sync.Mutex
	done bool
}

// Read reads the body; at io.EOF the connection is released.
func (b *hopBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
		if errors.Is(err, net.ErrClosed) {
			err = io.ErrUnexpectedEOF // the connection was closed under the read (context done)
		}
	}
	return n, err
}

// Close releases the connection (closed unless the body was read to the end).
func (b *hopBody) Close() error {
	b.finish(false)
	return nil
}

func (b *hopBody) finish(eof bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if eof {
		_ = b.rc.Close()
		b.t.release(b.c, b.stop, b.keep)
		return
	}
	b.stop()
	_ = b.c.Conn.Close()
}

// isDirect reports whether name selects the directTransport ("" is the default).
func isDirect(name string) bool { return name == "" || strings.EqualFold(name, BackendClientDirect) }
