package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Connection states for Shutdown: idle (waiting for a request's first byte; a new
// connection is idle), active (a request is being read or served), closed (Shutdown
// closed it while idle).
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// maxPostHandlerReadBytes is how much of a request body the handler left unread is
// discarded to keep the connection (net/http's value).
const maxPostHandlerReadBytes = 256 << 10

// rstAvoidanceDelay bounds the wait, after a 431 or a body too large to discard, for the
// client to close before the connection is closed (so the answer is not lost to a
// reset of unread data), as net/http.
const rstAvoidanceDelay = 500 * time.Millisecond

// pendSize is the body buffered before the response header is written: a body that
// fits when the handler returns gets a Content-Length (net/http's
// bufferBeforeChunkingSize).
const pendSize = 2048

var (
	readerPool sync.Pool // *bufio.Reader on a connReader
	writerPool sync.Pool // *bufio.Writer on a connWriter
	// aLongTimeAgo is a deadline in the past: it ends a pending read at once.
	aLongTimeAgo = time.Unix(1, 0)
)

// conn is one client connection and its serving loop. Its fields are the serving
// goroutine's, but for state (Shutdown, atomically), cur (the sweeper) and what the
// watcher writes before it ends (cr.hasByte, gone), read after waiting for it.
type conn struct {
	srv        *Server
	rwc        net.Conn
	remoteAddr string
	base       context.Context
	state      atomic.Int32
	cr         connReader
	br         *bufio.Reader
	bw         *bufio.Writer
	cur        atomic.Pointer[response] // the request being served, for the sweeper
	cancel     context.CancelCauseFunc  // the current request's, for write errors
	werr       error                    // the first write error
	gone       bool                     // the watcher saw the client leave
	hijacked   bool
	lastMethod string
	h2Preface  bool   // the current request is the HTTP/2 preface
	hbuf       []byte // the response header being written
	pend       []byte // the body written before the header (cap pendSize)
	scan       headerScan
}

func (s *Server) newConn(rwc net.Conn, base context.Context) *conn {
	c := &conn{srv: s, rwc: rwc, base: base}
	if ra := rwc.RemoteAddr(); ra != nil {
		c.remoteAddr = ra.String()
	}
	c.cr.c = c
	return c
}

// closeIfIdle closes c if it waits for a request (Shutdown).
func (c *conn) closeIfIdle() {
	if c.state.CompareAndSwap(stateIdle, stateClosed) {
		_ = c.rwc.Close()
	}
}

// serve is the connection's goroutine: read a request, serve it, repeat.
func (c *conn) serve() {
	srv := c.srv
	defer func() {
		if !c.hijacked {
			c.close()
		}
		srv.trackConn(c, false)
	}()
	c.br = getReader(&c.cr)
	c.bw = getWriter(connWriter{c})
	c.pend = make([]byte, 0, pendSize)
	if d := srv.ReadHeaderTimeout; d > 0 {
		_ = c.rwc.SetReadDeadline(time.Now().Add(d))
	}
	for first := true; ; first = false {
		if !c.awaitRequest(first) {
			return
		}
		req, ok := c.readRequest()
		if !ok {
			return
		}
		if !c.serveRequest(req) {
			return
		}
		if srv.shutting.Load() {
			return
		}
	}
}

// awaitRequest waits for the next request's first byte: idle (Shutdown may close the
// connection) under IdleTimeout, then under ReadHeaderTimeout. Bytes already read (a
// pipelined request) go on at once. False when the connection is done.
func (c *conn) awaitRequest(first bool) bool {
	srv := c.srv
	if c.br.Buffered() > 0 {
		if d := srv.ReadHeaderTimeout; d > 0 {
			_ = c.rwc.SetReadDeadline(time.Now().Add(d))
		}
		return true
	}
	idle := srv.idleTimeout()
	if !first {
		if idle > 0 {
			_ = c.rwc.SetReadDeadline(time.Now().Add(idle))
		}
	}
	c.state.Store(stateIdle)
	if srv.shutting.Load() {
		return false
	}
	if _, err := c.br.Peek(1); err != nil {
		return false
	}
	if !c.state.CompareAndSwap(stateIdle, stateActive) {
		return false // Shutdown closed it
	}
	if !first {
		if d := srv.ReadHeaderTimeout; d > 0 {
			_ = c.rwc.SetReadDeadline(time.Now().Add(d))
		} else if idle > 0 {
			_ = c.rwc.SetReadDeadline(time.Time{})
		}
	}
	return true
}

// readRequest reads and checks the next request, answering what net/http's server
// answers to a bad one (the package doc lists them); false when the connection is done.
func (c *conn) readRequest() (*http.Request, bool) {
	srv := c.srv
	if c.lastMethod == "POST" { // RFC 7230 section 3: tolerate a CRLF after a POST's body
		peek, _ := c.br.Peek(4)
		_, _ = c.br.Discard(numLeadingCRorLF(peek))
	}
	c.scan.reset()
	buffered, _ := c.br.Peek(c.br.Buffered())
	c.scan.feed(buffered)
	// The bound counts from the request's first byte, bytes already buffered included
	// (net/http counts from its next read: up to 4 KiB more on a kept-alive connection).
	c.cr.limitHeader(srv.headerLimit() - int64(len(buffered)))
	req, err := http.ReadRequest(c.br)
	hit := c.cr.endHeader()
	if err != nil {
		switch {
		case hit:
			c.answerError("431 Request Header Fields Too Large", "431 Request Header Fields Too Large")
			c.closeWriteAndWait()
		case isUnsupportedTE(err):
			c.answerError("501 Not Implemented", "Unsupported transfer encoding")
		case isCommonNetReadError(err):
		default:
			c.answerError("400 Bad Request", "400 Bad Request")
		}
		return nil, false
	}
	if srv.ReadHeaderTimeout > 0 {
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
	c.h2Preface = isH2Preface(req) && c.scan.hosts == 0 // ReadRequest removed Host
	if msg := checkRequest(req, &c.scan, c.h2Preface); msg != "" {
		if strings.HasPrefix(msg, "505") {
			c.answerError(msg, msg)
		} else {
			c.answerError("400 Bad Request: "+msg, "400 Bad Request: "+msg)
		}
		return nil, false
	}
	c.lastMethod = req.Method
	return req, true
}

// answerError writes a plain-text error answer the way net/http's server does and
// marks the connection for closing.
func (c *conn) answerError(status, body string) {
	const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	_, _ = io.WriteString(c.rwc, "HTTP/1.1 "+status+errorHeaders+body)
}

// serveRequest runs the handler for req and ends its response; false when the
// connection is not to be reused (or was hijacked).
func (c *conn) serveRequest(req *http.Request) bool {
	srv := c.srv
	ctx, cancel := context.WithCancelCause(c.base)
	// In place, not a copy: the body reader records the trailer in *req (r.Trailer).
	r := req
	*r = *req.WithContext(ctx)
	r.RemoteAddr = c.remoteAddr
	w := &response{c: c, req: r, cancel: cancel, header: make(http.Header), contentLength: -1,
		isHEAD: r.Method == "HEAD", proto11: r.ProtoAtLeast(1, 1),
		wants10KeepAlive: wants10KeepAlive(r), wantsClose: r.Close || hasToken(r.Header.Get("Connection"), "close")}
	c.cancel = cancel
	if r.Body == nil || r.Body == http.NoBody {
		w.body.eof.Store(true)
	} else {
		w.body.src, w.body.w = r.Body, w
		r.Body = &w.body
	}
	if expectsContinue(r) {
		if r.ProtoAtLeast(1, 1) && r.ContentLength != 0 {
			w.body.cont = true
			w.canContinue.Store(true)
		}
	} else if r.Header.Get("Expect") != "" {
		w.header.Set("Connection", "close")
		w.WriteHeader(http.StatusExpectationFailed)
		w.finish()
		cancel(nil)
		return false
	}
	if c.h2Preface {
		w.closeAfterReply = true
	}
	if c.scan.lengths > 0 && len(r.TransferEncoding) > 0 || c.scan.encs > 0 && !r.ProtoAtLeast(1, 1) {
		// Content-Length and Transfer-Encoding both (framed by the latter, as net/http
		// does), or Transfer-Encoding on HTTP/1.0 (faulty framing: http.ReadRequest
		// ignores it): answered, then the connection closed, as RFC 9112 section 6.1
		// requires of a server (net/http's own server keeps it open).
		w.closeAfterReply = true
	}
	h := srv.handler()
	if r.RequestURI == "*" && r.Method == "OPTIONS" {
		h = http.HandlerFunc(globalOptions)
	}
	watched := srv.ClientGoneAfter >= 0
	if watched {
		w.start = srv.now()
		c.cur.Store(w)
		srv.sweep.begin()
	}
	ok := c.callHandler(h, w, r)
	c.stopWatch(w)
	cancel(nil)
	if watched {
		c.cur.Store(nil)
		srv.sweepEnd()
	}
	if !ok || c.hijacked {
		return false
	}
	w.finish()
	if w.writeDeadline {
		_ = c.rwc.SetWriteDeadline(time.Time{})
	}
	if w.readDeadline.Load() { // set by the handler, the body not read to its end
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
	if !w.shouldReuse() {
		if w.bodyTooBig {
			c.closeWriteAndWait()
		}
		return false
	}
	return true
}

// callHandler runs h, recovering a panic (logged unless http.ErrAbortHandler); false
// after a panic.
func (c *conn) callHandler(h http.Handler, w *response, r *http.Request) (ok bool) {
	defer func() {
		if err := recover(); err != nil {
			if err != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logf("h1: panic serving %v: %v\n%s", c.remoteAddr, err, buf)
			}
			ok = false
		}
	}()
	h.ServeHTTP(w, r)
	return true
}

// globalOptions answers OPTIONS * as net/http's globalOptionsHandler.
func globalOptions(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		mb := http.MaxBytesReader(w, r.Body, 4<<10)
		_, _ = io.Copy(io.Discard, mb)
	}
}

// close flushes what is buffered and closes the connection; the buffers go back to
// their pools.
func (c *conn) close() {
	if c.bw != nil {
		_ = c.bw.Flush()
		putWriter(c.bw)
		c.bw = nil
	}
	_ = c.rwc.Close()
	if c.br != nil {
		putReader(c.br)
		c.br = nil
	}
}

// closeWriteAndWait flushes, closes the write side and waits (bounded) for the client to
// close, discarding what it still sends, so that it reads the answer.
func (c *conn) closeWriteAndWait() {
	_ = c.bw.Flush()
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.rwc.SetReadDeadline(time.Now().Add(rstAvoidanceDelay))
	_, _ = io.Copy(io.Discard, c.rwc)
}
