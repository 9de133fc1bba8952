package h1

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// sendHeader writes the status line and header to the connection's buffer, deciding
// the framing as net/http's chunkWriter.writeHeader does; p is the start of the body
// (for Content-Type sniffing and, once the handler is done, the Content-Length).
func (w *response) sendHeader(p []byte) {
	w.headerSent = true
	c := w.c
	keepAlives := !c.srv.shutting.Load()
	trailers := w.trailerDecl || w.trailerKey
	te := first(w.te)
	hasTE := te != ""
	hasCLHeader := len(w.cl) > 0
	allowed := bodyAllowedForStatus(w.status)
	var autoCL, setConn, setTE, setCT string
	if w.handlerDone && !trailers && !hasTE && allowed && !hasCLHeader && !w.clDropped && (!w.isHEAD || len(p) > 0) {
		w.contentLength = int64(len(p))
		autoCL = strconv.Itoa(len(p))
	}
	if w.wants10KeepAlive && keepAlives && hasCLHeader && first(w.connection) == "keep-alive" {
		w.closeAfterReply = false
	}
	hasCL := w.contentLength != -1
	if w.wants10KeepAlive && (w.isHEAD || hasCL || !allowed) {
		if w.connection == nil {
			setConn = "keep-alive"
		}
	} else if !w.proto11 || w.wantsClose {
		w.closeAfterReply = true
	}
	if first(w.connection) == "close" || !keepAlives {
		w.closeAfterReply = true
	}
	if w.body.cont && !w.body.eof.Load() {
		w.closeAfterReply = true // a 100-continue body never read: do not wait for it
	}
	emitConn := true
	if w.req.ContentLength != 0 && !w.closeAfterReply && !w.fullDuplex {
		if w.body.discard() {
			w.body.closed = true // as net/http: a later Read is http.ErrBodyReadAfterClose, not EOF
		} else {
			w.bodyTooBig = true
			w.closeAfterReply = true
			emitConn, setConn = false, "close"
		}
	}
	if allowed && !w.hasCE && !w.hasCT && !hasTE && len(p) > 0 {
		setCT = http.DetectContentType(p)
	}
	emitCL := hasCLHeader && allowed
	if hasCL && hasTE && te != "identity" {
		c.srv.logf("h1: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.contentLength)
		emitCL, hasCL, autoCL = false, false, ""
		w.contentLength = -1
	}
	emitTE := false
	switch {
	case w.isHEAD || !allowed:
	case hasCL:
	case w.proto11:
		if hasTE && te == "identity" {
			w.closeAfterReply = true
		} else {
			w.chunking = true
			setTE = "chunked"
			emitTE = hasTE && te != "chunked"
		}
	default:
		w.closeAfterReply = true
	}
	if w.chunking {
		emitCL, autoCL = false, ""
	}
	if w.closeAfterReply && (!keepAlives || !hasToken(first(w.connection), "close")) && !w.upgrade {
		emitConn = false
		setConn = ""
		if w.proto11 {
			setConn = "close"
		}
	}
	bw := c.bw
	writeStatusLine(bw, w.proto11, w.status)
	_, _ = bw.Write(w.snap)
	if emitCL {
		writeFields(bw, "Content-Length", w.cl)
	}
	if emitTE {
		writeFields(bw, "Transfer-Encoding", w.te)
	}
	if emitConn {
		writeFields(bw, "Connection", w.connection)
	}
	writeField(bw, "Content-Type", setCT)
	writeField(bw, "Connection", setConn)
	writeField(bw, "Transfer-Encoding", setTE)
	if !w.hasDate {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(appendDate(bw.AvailableBuffer()))
		_, _ = bw.WriteString("\r\n")
	}
	writeField(bw, "Content-Length", autoCL)
	_, _ = bw.WriteString("\r\n")
}

// finish ends the response after the handler: the header if not sent yet (with a
// Content-Length for a body that fits the buffer), the buffered body, the last chunk
// and trailers; then it flushes and discards what is left of the request body
// (bounded).
func (w *response) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	c := w.c
	if !w.headerSent {
		pend := c.pend
		w.sendHeader(pend)
		c.pend = pend[:0]
		_, _ = w.writeBody(nil, pend)
	}
	bw := c.bw
	if w.chunking {
		_, _ = bw.WriteString("0\r\n")
		if t := w.finalTrailers(); t != nil {
			_ = t.Write(bw)
		}
		_, _ = bw.WriteString("\r\n")
	}
	_ = bw.Flush()
	if !w.closeAfterReply && !w.body.discard() {
		w.closeAfterReply = true
	}
}

// finalTrailers collects the trailers: keys with http.TrailerPrefix and the declared
// ones, from the handler's header now.
func (w *response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.header {
		if kk, found := strings.CutPrefix(k, http.TrailerPrefix); found {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		for _, v := range w.header[k] {
			if t == nil {
				t = make(http.Header)
			}
			t.Add(k, v)
		}
	}
	return t
}

// shouldReuse reports whether the connection can serve another request.
func (w *response) shouldReuse() bool {
	if w.closeAfterReply || w.c.werr != nil || w.c.gone {
		return false
	}
	if !w.isHEAD && w.contentLength != -1 && bodyAllowedForStatus(w.status) && w.contentLength != w.written {
		return false // the declared length was not written: out of step
	}
	return true
}

// bytesWriter appends to b (the header snapshot).
type bytesWriter struct{ b []byte }

func (w *bytesWriter) WriteString(s string) (int, error) {
	w.b = append(w.b, s...)
	return len(s), nil
}

func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	if is11 {
		_, _ = bw.WriteString("HTTP/1.1 ")
	} else {
		_, _ = bw.WriteString("HTTP/1.0 ")
	}
	var b [3]byte
	_, _ = bw.Write(strconv.AppendInt(b[:0], int64(code), 10))
	_ = bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		_, _ = bw.WriteString(text)
	} else {
		_, _ = bw.WriteString("status code " + strconv.Itoa(code))
	}
	_, _ = bw.WriteString("\r\n")
}

// writeField writes "key: v" when v is not empty.
func writeField(bw *bufio.Writer, key, v string) {
	if v == "" {
		return
	}
	_, _ = bw.WriteString(key)
	_, _ = bw.WriteString(": ")
	_, _ = bw.WriteString(v)
	_, _ = bw.WriteString("\r\n")
}

// writeFields writes the handler's values of key, cleaned as http.Header.Write does.
func writeFields(bw *bufio.Writer, key string, vv []string) {
	for _, v := range vv {
		if strings.ContainsAny(v, "\r\n") {
			v = strings.Map(func(r rune) rune {
				if r == '\r' || r == '\n' {
					return ' '
				}
				return r
			}, v)
		}
		v = strings.Trim(v, " \t")
		_, _ = bw.WriteString(key)
		_, _ = bw.WriteString(": ")
		_, _ = bw.WriteString(v)
		_, _ = bw.WriteString("\r\n")
	}
}

func first(vv []string) string {
	if len(vv) == 0 {
		return ""
	}
	return vv[0]
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == 204, status == 304:
		return false
	}
	return true
}

// foreachHeaderElement calls fn for each non-empty element of the list v.
func foreachHeaderElement(v string, fn func(string)) {
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.Trim(f, " \t"); f != "" {
			fn(f)
		}
	}
}

// dateEntry is the Date value of one second.
type dateEntry struct {
	sec int64
	b   []byte
}

var dateCache atomic.Pointer[dateEntry]

// appendDate appends the current time in http.TimeFormat, formatted once a second.
func appendDate(b []byte) []byte {
	now := time.Now()
	sec := now.Unix()
	e := dateCache.Load()
	if e == nil || e.sec != sec {
		e = &dateEntry{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
		dateCache.Store(e)
	}
	return append(b, e.b...)
}
