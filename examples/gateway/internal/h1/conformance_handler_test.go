package h1_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

// confHandler is the handler both servers serve in the differential table. Every
// response it writes carries X-Handler (the harness tells a handler's answer from the
// server's own that way); the path picks the behaviour, anything else echoes what the
// handler saw of the request, so that a difference in parsing shows as a difference
// in the body.
func confHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Handler", "1")
	switch r.URL.Path {
	case "/noread": // never reads the body
		_, _ = io.WriteString(w, "ok")
	case "/flush": // flushes before the end: chunked on HTTP/1.1
		_, _ = io.WriteString(w, "a")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "b")
	case "/big": // more than any write buffer, never flushed
		_, _ = w.Write(bytes.Repeat([]byte("x"), 64<<10))
	case "/empty":
	case "/204":
		w.WriteHeader(http.StatusNoContent)
		_, _ = io.WriteString(w, "not sent")
	case "/304":
		w.WriteHeader(http.StatusNotModified)
	case "/html": // sniffed Content-Type
		_, _ = io.WriteString(w, "<html><body>x</body></html>")
	case "/setcl":
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	case "/trailer":
		w.Header().Set("Trailer", "X-T")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-T", "t1")
		w.Header().Set(http.TrailerPrefix+"X-U", "u1")
	case "/early":
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "done")
	case "/inject": // CR/LF in a header value and a trailer value: no response splitting
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("X-Inj", "a\r\nX-Injected: 1")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-T", "t\r\nX-Injected-Trailer: 1")
	case "/inject-name": // header names a client cannot parse
		w.Header()["Bad Name"] = []string{"x"}
		w.Header()["X-Ok"] = []string{"y"}
		_, _ = io.WriteString(w, "body")
	case "/cl-invalid":
		w.Header().Set("Content-Length", "abc")
		_, _ = io.WriteString(w, "body")
	case "/te-set": // the handler says chunked itself, with a Content-Length too
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "4")
		_, _ = io.WriteString(w, "body")
	case "/double-writeheader":
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "first wins")
	case "/head-cl": // HEAD: the handler states the length and writes nothing
		w.Header().Set("Content-Length", "1234")
	case "/keepalive-header":
		w.Header().Set("Connection", "keep-alive")
		_, _ = io.WriteString(w, "ka")
	case "/read-partial": // reads 10 bytes of the body only
		_, _ = io.CopyN(io.Discard, r.Body, 10)
		_, _ = io.WriteString(w, "partial")
	case "/early-cl": // a Content-Length set before a 103 is not sent with the 103
		w.Header().Set("Content-Length", "4")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "done")
	case "/early-then-read": // 103, then the body read (the 100 Continue after it), then 200
		w.WriteHeader(http.StatusEarlyHints)
		confEcho(w, r)
	case "/manual-100": // the handler writes 100 itself, then reads
		w.WriteHeader(http.StatusContinue)
		confEcho(w, r)
	case "/trailer-cl": // declared trailers with a Content-Length: no chunking, no trailers
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("Content-Length", "4")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-T", "t1")
	case "/flush-then-read": // reads the body after the header went out (no full duplex)
		_, _ = io.WriteString(w, "head ")
		w.(http.Flusher).Flush()
		body, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %q err=%v", body, err != nil)
	case "/duplex": // the same with EnableFullDuplex
		rc := http.NewResponseController(w)
		fmt.Fprintf(w, "duplex=%v ", rc.EnableFullDuplex() == nil)
		_ = rc.Flush()
		body, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %q err=%v", body, err)
	case "/read-deadline": // a past read deadline, then the body read
		rc := http.NewResponseController(w)
		set := rc.SetReadDeadline(time.Now().Add(-time.Second))
		body, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "set=%v read %q timeout=%v ctx=%v", set, body, errors.Is(err, os.ErrDeadlineExceeded), r.Context().Err())
	case "/write-deadline": // a write deadline in the future, then the body
		set := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(w, "set=%v", set)
	case "/status-bad":
		w.WriteHeader(1000)
		_, _ = io.WriteString(w, "after a bad code")
	case "/panic":
		panic("conformance: handler panic")
	case "/abort":
		panic(http.ErrAbortHandler)
	case "/panic-after-flush":
		_, _ = io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic("conformance: handler panic after a flush")
	case "/maxbytes":
		r.Body = http.MaxBytesReader(w, r.Body, 8)
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = io.WriteString(w, "too large")
			return
		}
		_, _ = io.WriteString(w, "fits")
	case "/close":
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	case "/cl-over": // declares 3, writes 5
		w.Header().Set("Content-Length", "3")
		_, err := io.WriteString(w, "hello")
		w.Header().Set("X-Late", fmt.Sprint(err)) // too late to be sent; kept for symmetry
	case "/cl-under": // declares 10, writes 3
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "abc")
	default:
		confEcho(w, r)
	}
}

// confEcho answers with what the handler saw: method, request URI, protocol, Host,
// ContentLength, TransferEncoding, Close, the body (or its digest) and its read error,
// the trailers, the header, RemoteAddr's host, the context keys net/http sets, TLS.
func confEcho(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s host=%q cl=%d te=%v close=%v", r.Method, r.RequestURI, r.Proto,
		r.Host, r.ContentLength, r.TransferEncoding, r.Close)
	if len(body) > 64 {
		fmt.Fprintf(&b, " body=%d:%x", len(body), sha256.Sum256(body))
	} else {
		fmt.Fprintf(&b, " body=%q", body)
	}
	fmt.Fprintf(&b, " err=%v", err)
	var tr []string
	for k, v := range r.Trailer {
		tr = append(tr, k+"="+strings.Join(v, ","))
	}
	sort.Strings(tr)
	var hs []string
	for k, v := range r.Header {
		hs = append(hs, k+"="+strings.Join(v, ","))
	}
	sort.Strings(hs)
	fmt.Fprintf(&b, " trailers=%v header=%v", tr, hs)
	remote, _, _ := net.SplitHostPort(r.RemoteAddr)
	fmt.Fprintf(&b, " remote=%s local-addr-key=%v server-key=%v tls=%v", remote,
		r.Context().Value(http.LocalAddrContextKey) != nil, r.Context().Value(http.ServerContextKey) != nil, r.TLS != nil)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, b.String())
}
