package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// nopCloserWriterTo is the type io.NopCloser returns for a *bytes.Reader: the body
// rewrite and getBody give outgoing requests.
var nopCloserWriterTo = reflect.TypeOf(io.NopCloser(&bytes.Reader{}))

// writeRequestFast writes req to bw as req.Write would, when req is a plain one: an
// http URL without Opaque and a printable request URI, an ASCII host net/http would
// send unchanged, not CONNECT, no Close, Transfer-Encoding or Trailer, canonical header
// keys, and a body that is empty or all in memory (io.NopCloser over a *bytes.Reader
// holding exactly ContentLength bytes), with no httptrace hook for the written fields.
// The fields with different names come in the map's order rather than sorted (their
// order carries no meaning, RFC 9110 section 5.3); everything else — the request line,
// Host, the User-Agent rule, Content-Length, values with line breaks made spaces and
// trimmed, invalid field names left out, the body — is req.Write's, which
// TestWriteRequestFast and FuzzWriteRequestFast check by parsing both. It reports false,
// having written nothing, for any other request (the caller then calls req.Write).
// The error is bw's. No allocation of its own but the request URI (net/http's too).
func writeRequestFast(bw *bufio.Writer, req *http.Request) (bool, error) {
	u := req.URL
	if u.Opaque != "" || req.Method == http.MethodConnect || req.Close || len(req.TransferEncoding) > 0 || req.Trailer != nil {
		return false, nil
	}
	if t := httptrace.ContextClientTrace(req.Context()); t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.WroteRequest != nil) {
		return false, nil
	}
	var body *bytes.Reader
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		if req.ContentLength != 0 {
			return false, nil // net/http's error
		}
	case reflect.TypeOf(req.Body) == nopCloserWriterTo:
		r, ok := reflect.ValueOf(req.Body).Field(0).Interface().(*bytes.Reader)
		if !ok || req.ContentLength <= 0 || int64(r.Len()) != req.ContentLength {
			return false, nil
		}
		body = r
	default:
		return false, nil
	}
	host := req.Host
	if host == "" {
		host = u.Host
	}
	if !printableASCII(host) || strings.IndexByte(host, '%') >= 0 || !httpguts.ValidHostHeader(host) {
		return false, nil
	}
	ruri := u.RequestURI()
	if !printableASCII(ruri) {
		return false, nil
	}
	for k := range req.Header {
		if textproto.CanonicalMIMEHeaderKey(k) != k {
			return false, nil // its values' order against the canonical key's: sorted by req.Write
		}
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	_, _ = bw.WriteString(method)
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(ruri)
	_, _ = bw.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = bw.WriteString(host)
	_, _ = bw.WriteString("\r\n")
	ua := "Go-http-client/1.1" // net/http's default User-Agent
	if _, ok := req.Header["User-Agent"]; ok {
		ua = req.Header.Get("User-Agent")
	}
	if ua != "" {
		writeField(bw, "User-Agent", ua)
	}
	n := req.ContentLength
	if n > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(bw.AvailableBuffer(), n, 10))
		_, _ = bw.WriteString("\r\n")
	}
	for k, vv := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			writeField(bw, k, v)
		}
	}
	_, err := bw.WriteString("\r\n")
	if err == nil && body != nil {
		_, err = body.WriteTo(bw)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return true, err
}

// newlineToSpace is net/http's replacement of line breaks in written field values.
var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// writeField writes one field line as net/http's Header.Write does: line breaks in v
// made spaces, leading and trailing white space trimmed.
func writeField(bw *bufio.Writer, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = newlineToSpace.Replace(v)
	}
	_, _ = bw.WriteString(k)
	_, _ = bw.WriteString(": ")
	_, _ = bw.WriteString(textproto.TrimString(v))
	_, _ = bw.WriteString("\r\n")
}

// printableASCII reports whether s has only bytes 0x20-0x7e.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
