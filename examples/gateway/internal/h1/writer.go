package h1

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// errHijackAfterReturn is Hijack's error once the handler has returned.
var errHijackAfterReturn = errors.New("h1: Hijack called after the handler returned")

// response is the http.ResponseWriter of one request (see the package doc for its
// framing). Like net/http's, it is not safe for concurrent use, but for the "100
// Continue" a body read writes (under contMu).
type response struct {
	c      *conn
	req    *http.Request
	cancel func(error)
	body   reqBody
	header http.Header
	start  time.Time // when the handler was called (the client-gone watch)

	// The client-gone watch (watch.go): watchNone, watchOn or watchStopped.
	watch        atomic.Int32
	watchAborted atomic.Bool
	watchDone    chan struct{}

	status          int
	wroteHeader     bool // WriteHeader (a final status) was called
	headerSent      bool // the header went to the connection's buffer
	handlerDone     bool
	hijacked        bool
	isHEAD, proto11 bool
	chunking        bool
	closeAfterReply bool
	bodyTooBig      bool // the unread body was too large to discard
	clDropped       bool // the handler's Content-Length was invalid
	fullDuplex      bool
	readDeadline    atomic.Bool // the handler set one: cleared at the body's end (set from any goroutine)
	writeDeadline   bool        // the handler set one: cleared after the response

	wants10KeepAlive, wantsClose bool

	contentLength int64 // declared (or decided), -1: unknown
	written       int64

	// The header as WriteHeader saw it: snap is every field but those below, written;
	// these are kept apart as the framing decides whether to send them.
	snap                    []byte
	cl, te, connection      []string
	hasCT, hasCE, hasDate   bool
	upgrade                 bool // Upgrade set and Connection: upgrade (a protocol switch)
	trailerDecl, trailerKey bool // a Trailer header, a key with http.TrailerPrefix
	trailers                []string

	canContinue atomic.Bool
	contMu      sync.Mutex
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
	_ http.Hijacker       = (*response)(nil)
)

// excluded fields of the header snapshot: written apart (framing) or not at all.
var (
	excludeFraming    = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true}
	excludeFraming304 = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Content-Type": true}
	excludeNoBody     = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}
)

// Header returns the header map the handler fills before WriteHeader.
func (w *response) Header() http.Header { return w.header }

// WriteHeader sends the status: a 1xx other than 101 at once with the current header,
// a final status when the header is written (the first flush, or the handler's end).
func (w *response) WriteHeader(code int) {
	if w.hijacked {
		w.c.srv.logf("h1: WriteHeader on a hijacked connection")
		return
	}
	if w.wroteHeader {
		w.c.srv.logf("h1: superfluous WriteHeader call (%d after %d)", code, w.status)
		return
	}
	if code < 100 || code > 999 {
		w.c.srv.logf("h1: invalid WriteHeader code %d: answering 500", code)
		code = http.StatusInternalServerError
	}
	if code < 101 || code > 199 {
		w.disableContinue()
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		bw := w.c.bw
		writeStatusLine(bw, w.proto11, code)
		_ = w.header.WriteSubset(bw, excludeNoBody)
		_, _ = bw.WriteString("\r\n")
		_ = bw.Flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	h := w.header
	if cl := h.Get("Content-Length"); cl != "" {
		v, err := strconv.ParseInt(cl, 10, 64)
		if err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.srv.logf("h1: invalid Content-Length of %q", cl)
			h.Del("Content-Length")
			w.clDropped = true // not sent, and no length of ours either: chunked, as net/http
		}
	}
	w.cl, w.te, w.connection = h["Content-Length"], h["Transfer-Encoding"], h["Connection"]
	_, w.hasCT = h["Content-Type"]
	_, w.hasDate = h["Date"]
	w.hasCE = h.Get("Content-Encoding") != ""
	w.upgrade = code == http.StatusSwitchingProtocols && h.Get("Upgrade") != "" &&
		httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade")
	exclude := excludeFraming
	if code == http.StatusNotModified {
		exclude = excludeFraming304
	}
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if !w.trailerKey {
				exclude = cloneExclude(exclude)
				w.trailerKey = true
			}
			exclude[k] = true
		}
	}
	for _, v := range h["Trailer"] {
		w.trailerDecl = true
		foreachHeaderElement(v, w.declareTrailer)
	}
	buf := bytesWriter{b: w.c.hbuf[:0]}
	_ = h.WriteSubset(&buf, exclude)
	w.snap = buf.b
	w.c.hbuf = buf.b
}

func cloneExclude(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (w *response) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if !httpguts.ValidTrailerHeader(k) {
		return
	}
	w.trailers = append(w.trailers, k)
}

// Write writes body bytes (WriteHeader(200) first when no status was written).
func (w *response) Write(p []byte) (int, error) {
	if w.hijacked {
		if len(p) > 0 {
			w.c.srv.logf("h1: Write on a hijacked connection")
		}
		return 0, http.ErrHijacked
	}
	if w.canContinue.Load() {
		w.disableContinue()
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.headerSent {
		pend := w.c.pend
		if len(pend)+len(p) <= cap(pend) {
			w.c.pend = append(pend, p...)
			return len(p), nil
		}
		var sniff [512]byte
		n := copy(sniff[:], pend)
		n += copy(sniff[n:], p)
		w.sendHeader(sniff[:n])
		w.c.pend = pend[:0]
		return w.writeBody(pend, p)
	}
	return w.writeBody(nil, p)
}

// writeBody writes a then b as body bytes (one chunk when chunked); it returns len(b).
func (w *response) writeBody(a, b []byte) (int, error) {
	if w.isHEAD {
		return len(b), nil
	}
	bw := w.c.bw
	n := len(a) + len(b)
	if n == 0 {
		return 0, nil
	}
	if w.chunking {
		var hex [16]byte
		_, _ = bw.Write(strconv.AppendInt(hex[:0], int64(n), 16))
		_, _ = bw.WriteString("\r\n")
	}
	_, _ = bw.Write(a)
	_, err := bw.Write(b)
	if w.chunking && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		_ = w.c.rwc.Close()
		return 0, err
	}
	return len(b), nil
}

// Flush sends the header (WriteHeader(200) if not written) and what is buffered.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush returning the write error; http.ErrHijacked after Hijack.
func (w *response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		pend := w.c.pend
		w.sendHeader(pend)
		w.c.pend = pend[:0]
		if _, err := w.writeBody(nil, pend); err != nil {
			return err
		}
	}
	return w.c.bw.Flush()
}

// SetReadDeadline sets the connection's read deadline (http.ResponseController); it
// is cleared when the body has been read to its end, as net/http. Safe to call from
// any goroutine while the handler runs (a read it interrupts fails), as net/http's.
func (w *response) SetReadDeadline(t time.Time) error {
	w.readDeadline.Store(!t.IsZero())
	return w.c.rwc.SetReadDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline (http.ResponseController);
// it is cleared after the response.
func (w *response) SetWriteDeadline(t time.Time) error {
	if w.hijacked {
		return http.ErrHijacked
	}
	w.writeDeadline = true
	return w.c.rwc.SetWriteDeadline(t)
}

// EnableFullDuplex lets the handler read the request body while it writes the
// response: it is not discarded when the header is written (http.ResponseController).
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// Hijack hands the connection over: the header written so far is flushed, the watch
// stopped; the reader holds any bytes already read. The server neither tracks nor
// closes the connection after.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.handlerDone {
		return nil, nil, errHijackAfterReturn
	}
	c := w.c
	if w.wroteHeader && !w.headerSent {
		pend := c.pend
		w.sendHeader(pend)
		c.pend = pend[:0]
		_, _ = w.writeBody(nil, pend)
	}
	_ = c.bw.Flush()
	c.stopWatch(w)
	w.hijacked, c.hijacked = true, true
	if c.cr.hasByte {
		_, _ = c.br.Peek(c.br.Buffered() + 1)
	}
	c.cancel = nil
	c.srv.trackConn(c, false)
	return c.rwc, bufio.NewReadWriter(c.br, bufio.NewWriter(c.rwc)), nil
}

// writeContinue writes "100 Continue" once, unless a final status came first.
func (w *response) writeContinue() {
	w.contMu.Lock()
	defer w.contMu.Unlock()
	if w.canContinue.Load() {
		_, _ = w.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		_ = w.c.bw.Flush()
		w.canContinue.Store(false)
	}
}

func (w *response) disableContinue() {
	if !w.canContinue.Load() {
		return
	}
	w.contMu.Lock()
	w.canContinue.Store(false)
	w.contMu.Unlock()
}

func (w *bytesWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}
