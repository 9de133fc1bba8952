package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
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
	scan       hostScan
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

// checkRequest does the checks net/http's server does after parsing that
// http.ReadRequest does not; it returns "" or the answer's reason.
func checkRequest(req *http.Request, scan *hostScan, h2Preface bool) string {
	if req.ProtoMajor != 1 && (req.ProtoMajor != 2 || req.ProtoMinor != 0 || req.Method != "PRI" || req.RequestURI != "*") {
		return "505 HTTP Version Not Supported: unsupported protocol version"
	}
	if req.ProtoAtLeast(1, 1) && scan.hosts == 0 && !h2Preface && req.Method != "CONNECT" {
		return "missing required Host header"
	}
	if scan.hosts == 1 && !httpguts.ValidHostHeader(scan.host()) {
		return "malformed Host header"
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return "invalid header value"
			}
		}
	}
	return ""
}

// isH2Preface reports the "PRI * HTTP/2.0" preface without header fields (Host
// aside: the caller checks it), which net/http hands to the handler.
func isH2Preface(r *http.Request) bool {
	return r.Method == "PRI" && len(r.Header) == 0 && r.URL.Path == "*" && r.Proto == "HTTP/2.0"
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
		srv.sweep.end()
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

// connReader reads the connection for the bufio.Reader: during a request's header it
// is bounded (the header limit) and feeds the Host scan; a read error while a
// request is served (its body) cancels the request's context, as net/http. hasByte is
// a byte the client-gone watch read.
type connReader struct {
	c       *conn
	limited bool
	remain  int64
	hasByte bool
	byteBuf [1]byte
}

// limitHeader bounds the reads to n bytes until endHeader.
func (cr *connReader) limitHeader(n int64) { cr.limited, cr.remain = true, n }

// endHeader lifts the bound; it reports whether it was reached.
func (cr *connReader) endHeader() bool {
	hit := cr.remain <= 0
	cr.limited = false
	return hit
}

func (cr *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if cr.limited {
		if cr.remain <= 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > cr.remain {
			p = p[:cr.remain]
		}
	}
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.account(p[:1])
		return 1, nil
	}
	n, err := cr.c.rwc.Read(p)
	cr.account(p[:n])
	if err != nil && !cr.limited {
		if cancel := cr.c.cancel; cancel != nil {
			cancel(ErrClientGone)
		}
	}
	return n, err
}

// account counts (and scans) what a header read took.
func (cr *connReader) account(p []byte) {
	if cr.limited {
		cr.remain -= int64(len(p))
		cr.c.scan.feed(p)
	}
}

// connWriter writes the connection for the bufio.Writer; a failed write cancels the
// request's context with cause ErrClientGone, as net/http.
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.rwc.Write(p)
	if err != nil && w.c.werr == nil {
		w.c.werr = err
		if cancel := w.c.cancel; cancel != nil {
			cancel(ErrClientGone)
		}
	}
	return n, err
}

// reqBody is the request body as the handler sees it: it writes "100 Continue" at the
// first read when the client expects it, notes the end (the client-gone watch may
// start then; a read deadline the handler set is cleared then), and its Close does not
// read on (what is left is discarded after the handler, bounded).
type reqBody struct {
	src    io.ReadCloser
	w      *response
	eof    atomic.Bool // read to its end (or no body): the watch may read the connection
	closed bool
	cont   bool  // Expect: 100-continue applies
	n      int64 // bytes read
}

func (b *reqBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof.Load() {
		return 0, io.EOF
	}
	if b.w.canContinue.Load() {
		b.w.writeContinue()
	}
	n, err := b.src.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.ended()
	}
	return n, err
}

// ended notes the body's end.
func (b *reqBody) ended() {
	if b.w.readDeadline.CompareAndSwap(true, false) {
		_ = b.w.c.rwc.SetReadDeadline(time.Time{})
	}
	b.eof.Store(true)
}

func (b *reqBody) Close() error {
	b.closed = true
	return nil
}

// discard reads what is left of the body, up to maxPostHandlerReadBytes; false when
// more is left or the read failed (the connection cannot be reused).
func (b *reqBody) discard() bool {
	if b.eof.Load() {
		return true
	}
	if cl := b.w.req.ContentLength; cl > 0 && cl-b.n >= maxPostHandlerReadBytes {
		return false
	}
	_, err := io.CopyN(io.Discard, b.src, maxPostHandlerReadBytes+1)
	if err == io.EOF {
		b.ended()
		return true
	}
	return false
}

// hostScan finds the Host header lines in a request's raw header as it is read
// (http.ReadRequest removes them from the Header): their count and the first's value.
type hostScan struct {
	done     bool
	prevHost bool // the line before was the first Host line (or its continuation)
	hosts    int
	line     int  // bytes of the current line, CR excluded
	match    int  // bytes of "host:" matched at the line's start; -1: not a Host line
	inValue  bool // in a Host line's value
	value    []byte
}

func (s *hostScan) reset() {
	s.done, s.prevHost, s.hosts, s.line, s.match, s.inValue = false, false, 0, 0, 0, false
	s.value = s.value[:0]
}

// host is the first Host line's value as textproto makes it: trimmed, and joined with
// its continuation lines (obs-fold) by single spaces.
func (s *hostScan) host() string {
	var parts []string
	for part := range strings.SplitSeq(string(s.value), "\n") {
		if part = strings.Trim(part, " \t"); part != "" {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, " ")
}

func (s *hostScan) feed(p []byte) {
	const name = "host:"
	for _, b := range p {
		if s.done {
			return
		}
		switch {
		case b == '\n':
			if s.line == 0 {
				s.done = true // the blank line ending the header
				return
			}
			s.prevHost = s.inValue && s.hosts == 1
			s.line, s.match, s.inValue = 0, 0, false
			continue
		case b == '\r':
			continue
		case s.line == 0 && (b == ' ' || b == '\t') && s.prevHost:
			s.inValue = true // a continuation of the first Host line: part of its value
			s.value = append(s.value, '\n')
			s.line++
			continue
		}
		if s.line == 0 {
			s.prevHost = false
		}
		if s.inValue {
			if s.hosts == 1 {
				s.value = append(s.value, b)
			}
		} else if s.match >= 0 {
			if s.match < len(name) && lower(b) == name[s.match] {
				s.match++
				if s.match == len(name) {
					s.hosts++
					s.inValue = true
				}
			} else {
				s.match = -1
			}
		}
		s.line++
	}
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

func numLeadingCRorLF(v []byte) (n int) {
	for _, b := range v {
		if b == '\r' || b == '\n' {
			n++
			continue
		}
		break
	}
	return
}

// isUnsupportedTE reports http.ReadRequest's unsupported Transfer-Encoding error
// (its type is net/http's own).
func isUnsupportedTE(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unsupported transfer encoding") || strings.HasPrefix(s, "too many transfer encodings")
}

// isCommonNetReadError is net/http's: a request not read because the connection
// ended, timed out or failed; no answer is written.
func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "read"
}

func expectsContinue(r *http.Request) bool {
	return hasToken(r.Header.Get("Expect"), "100-continue")
}

func wants10KeepAlive(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.ProtoMinor != 0 {
		return false
	}
	return hasToken(r.Header.Get("Connection"), "keep-alive")
}

// hasToken reports whether v, a comma-separated list, holds token (case-insensitive).
func hasToken(v, token string) bool {
	for v != "" {
		var f string
		f, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.Trim(f, " \t"), token) {
			return true
		}
	}
	return false
}

func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, 4<<10)
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

func getWriter(w io.Writer) *bufio.Writer {
	if bw, ok := writerPool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, 4<<10)
}

func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}
